package lifecycle

import (
	"context"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// MaxPageSize is the most sandboxes one page holds.
const MaxPageSize = 1000

// ListOptions select sandboxes and page through them, oldest first.
type ListOptions struct {
	// Labels each must be on a sandbox, with that value.
	Labels map[string]string
	// Phase, when set, is the phase a sandbox must be in.
	Phase sandbox.Phase
	// Limit bounds the page (0 or more than MaxPageSize: MaxPageSize).
	Limit int
	// After is a page's Next: the list goes on after the sandbox it names.
	After string
}

// Page is one page of a list.
type Page struct {
	Sandboxes []*sandbox.Sandbox
	// Next, when set, is the After of the next page.
	Next string
}

// ListPage returns the sandboxes opts selects, a page at a time.
func (m *Manager) ListPage(ctx context.Context, opts ListOptions) (*Page, error) {
	if opts.Phase != "" && !slices.Contains(sandbox.Phases, opts.Phase) {
		return nil, errdefs.InvalidArgument("phase %q: want one of %v", opts.Phase, sandbox.Phases)
	}
	if opts.Limit < 0 {
		return nil, errdefs.InvalidArgument("limit %d: want 0 (the most, %d) or more", opts.Limit, MaxPageSize)
	}
	if opts.Limit == 0 || opts.Limit > MaxPageSize {
		opts.Limit = MaxPageSize
	}
	var after position
	if opts.After != "" {
		var err error
		if after, err = parsePosition(opts.After); err != nil {
			return nil, err
		}
	}
	all, err := m.cfg.Store.ListSandboxes(ctx, scope(ctx)) // oldest first: by created_at, then id
	if err != nil {
		return nil, err
	}
	page := &Page{}
	for _, sb := range all {
		if opts.After != "" && !after.before(sb) || !selected(sb, opts) {
			continue
		}
		if len(page.Sandboxes) == opts.Limit {
			page.Next = PageToken(page.Sandboxes[len(page.Sandboxes)-1])
			break
		}
		page.Sandboxes = append(page.Sandboxes, sb)
	}
	return page, nil
}

func selected(sb *sandbox.Sandbox, opts ListOptions) bool {
	if opts.Phase != "" && sb.Phase != opts.Phase {
		return false
	}
	for k, v := range opts.Labels {
		if got, ok := sb.Spec.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// PageToken is the After that continues a list past sb: a front end that
// must end a page early (at its message size) gives it as the next
// page's token.
func PageToken(sb *sandbox.Sandbox) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(sb.CreatedAt.UnixNano(), 10) + ":" + sb.ID))
}

// position is where a page ends, in the list's order.
type position struct {
	created time.Time
	id      string
}

func parsePosition(token string) (position, error) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	nanos, id, ok := strings.Cut(string(raw), ":")
	n, nerr := strconv.ParseInt(nanos, 10, 64)
	if err != nil || !ok || nerr != nil || id == "" {
		return position{}, errdefs.InvalidArgument("page token %q: not one a list returned", token)
	}
	return position{created: time.Unix(0, n), id: id}, nil
}

// before says whether p comes before sb in the list's order.
func (p position) before(sb *sandbox.Sandbox) bool {
	if !sb.CreatedAt.Equal(p.created) {
		return p.created.Before(sb.CreatedAt)
	}
	return p.id < sb.ID
}
