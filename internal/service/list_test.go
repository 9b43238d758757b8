package service

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/lifecycle"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// pager is a Lifecycle whose lists are pages of n sandboxes with big
// policies, as ListPage pages them.
type pager struct {
	stub
	all []*sandbox.Sandbox
}

func (p *pager) ListPage(_ context.Context, opts lifecycle.ListOptions) (*lifecycle.Page, error) {
	start := 0
	if opts.After != "" {
		for i, sb := range p.all {
			if lifecycle.PageToken(sb) == opts.After {
				start = i + 1
			}
		}
	}
	page := &lifecycle.Page{Sandboxes: p.all[start:]}
	if len(page.Sandboxes) > lifecycle.MaxPageSize {
		page.Sandboxes = page.Sandboxes[:lifecycle.MaxPageSize]
		page.Next = lifecycle.PageToken(page.Sandboxes[len(page.Sandboxes)-1])
	}
	return page, nil
}

func (p *pager) Protections(context.Context, *sandbox.Sandbox) string { return "" }
func (p *pager) Network(context.Context, *sandbox.Sandbox) string     { return "" }

// 20 sandboxes with 250 KiB policies are more than a gRPC client takes in
// one reply: each reply stays under it, and its token lists the rest.
func TestListRepliesStayUnderTheMessageLimit(t *testing.T) {
	p := &pager{}
	policy := "version: 1\n# " + strings.Repeat("x", 250<<10) + "\n"
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 20 {
		p.all = append(p.all, &sandbox.Sandbox{ID: fmt.Sprintf("id%02d", i), Name: fmt.Sprintf("big%02d", i),
			CreatedAt: t0.Add(time.Duration(i) * time.Second), Spec: sandbox.Spec{Policy: policy}})
	}
	api := corralv1.NewSandboxServiceClient(dial(t, Core{Sandboxes: p}))
	var names []string
	req := &corralv1.ListSandboxesRequest{}
	for range 20 {
		resp, err := api.ListSandboxes(context.Background(), req) // the client's default 4 MiB limit
		if err != nil {
			t.Fatal(err)
		}
		if size := proto.Size(resp); size > listReplyBytes+64<<10 {
			t.Fatalf("a reply of %d bytes", size)
		}
		for _, sb := range resp.GetSandboxes() {
			names = append(names, sb.GetName())
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	if len(names) != 20 || names[0] != "big00" || names[19] != "big19" {
		t.Errorf("listed %d sandboxes through the pages (%v); want all 20, in order", len(names), names)
	}
}
