package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

func manyLabels(n, valueLen int) map[string]string {
	labels := map[string]string{}
	for i := range n {
		labels[fmt.Sprintf("k%d", i)] = strings.Repeat("v", valueLen)
	}
	return labels
}

// args returns n arguments of size bytes each (the first one a program).
func args(n, size int) []string {
	out := []string{"sleep"}
	for len(out) < n {
		out = append(out, strings.Repeat("a", size))
	}
	return out
}

func TestCreateRefusesUnboundedOrInvalidInput(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		sleep := []string{"sleep", "1d"}
		cases := []struct {
			name      string
			requestID string
			spec      sandbox.Spec
			want      string // besides the sandbox's name
		}{
			{"many-labels", "", sandbox.Spec{Command: sleep, Labels: manyLabels(10000, 1)}, "labels: 10000 labels, more than 64"},
			{"one-too-many", "", sandbox.Spec{Command: sleep, Labels: manyLabels(MaxLabels+1, 1)}, "65 labels, more than 64"},
			{"huge-value", "", sandbox.Spec{Command: sleep, Labels: map[string]string{"k": strings.Repeat("x", 1<<20)}}, `label "k": value is 1048576 bytes, more than 256`},
			{"long-value", "", sandbox.Spec{Command: sleep, Labels: map[string]string{"k": strings.Repeat("x", MaxLabelValueBytes+1)}}, `label "k": value is 257 bytes`},
			{"nul-value", "", sandbox.Spec{Command: sleep, Labels: map[string]string{"k": "a\x00b"}}, `label "k" value: a control character at byte 1`},
			{"newline-value", "", sandbox.Spec{Command: sleep, Labels: map[string]string{"k": "a\nb"}}, `label "k" value: a control character`},
			{"utf8-value", "", sandbox.Spec{Command: sleep, Labels: map[string]string{"k": "\xff"}}, `label "k" value: not valid UTF-8`},
			{"reserved-key", "", sandbox.Spec{Command: sleep, Labels: map[string]string{"corral.id": "1"}}, `label key "corral.id": the corral. prefix is reserved`},
			{"long-key", "", sandbox.Spec{Command: sleep, Labels: map[string]string{strings.Repeat("k", 254): "1"}}, `1 to 253 bytes`},
			{"space-key", "", sandbox.Spec{Command: sleep, Labels: map[string]string{"a b": "1"}}, `label key "a b": use letters`},
			{"nul-key", "", sandbox.Spec{Command: sleep, Labels: map[string]string{"a\x00": "1"}}, `label key "a\x00": use letters`},
			{"dot-key", "", sandbox.Spec{Command: sleep, Labels: map[string]string{".a": "1"}}, `label key ".a"`},
			{"nul-arg", "", sandbox.Spec{Command: []string{"sh", "-c", "echo\x00hi"}}, "command: argument 3 contains a NUL byte"},
			{"utf8-arg", "", sandbox.Spec{Command: []string{"echo", "\xc3"}}, "command: argument 2 is not valid UTF-8"},
			{"empty-program", "", sandbox.Spec{Command: []string{"", "x"}}, "command: the first argument, the program to run, is empty"},
			{"many-args", "", sandbox.Spec{Command: args(MaxCommandArgs+1, 1)}, "command: 1025 arguments, more than 1024"},
			{"big-command", "", sandbox.Spec{Command: args(3, 64<<10)}, "command: 131080 bytes in all, more than 131072"},
			{"long-image", "", sandbox.Spec{Command: sleep, Image: strings.Repeat("i", MaxImageBytes+1)}, "image: 4097 bytes, more than 4096"},
			{"nul-image", "", sandbox.Spec{Command: sleep, Image: "busybox\x00:latest"}, `image "busybox\x00:latest": a control character at byte 7`},
			{"space-image", "", sandbox.Spec{Command: sleep, Image: "busy box"}, `image "busy box": white space at byte 4`},
			{"tab-image", "", sandbox.Spec{Command: sleep, Image: "busybox\t"}, `a control character at byte 7`},
			{"nbsp-image", "", sandbox.Spec{Command: sleep, Image: "busy\u00a0box"}, `white space at byte 4`},
			{"utf8-image", "", sandbox.Spec{Command: sleep, Image: "busy\xffbox"}, `not valid UTF-8`},
			{"long-request-id", strings.Repeat("r", MaxRequestIDBytes+1), sandbox.Spec{Command: sleep}, "request id: 257 bytes, more than 256"},
			{"nul-request-id", "r\x00", sandbox.Spec{Command: sleep}, "request id: a control character at byte 1"},
			{"big-policy", "", sandbox.Spec{Command: sleep, Policy: "# " + strings.Repeat("x", MaxPolicyBytes)}, "policy: 262146 bytes, more than 262144"},
		}
		for _, tc := range cases {
			_, _, err := h.m.Create(context.Background(), tc.name, tc.requestID, tc.spec)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s: err = %v, want invalid argument", tc.name, err)
				continue
			}
			msg := err.Error()
			if !strings.Contains(msg, fmt.Sprintf("sandbox %q: ", tc.name)) || !strings.Contains(msg, tc.want) {
				t.Errorf("%s: err = %q, want the sandbox's name and %q", tc.name, msg, tc.want)
			}
			if strings.Contains(msg, "\n") || len(msg) > 300 {
				t.Errorf("%s: the message is not one short line: %d bytes", tc.name, len(msg))
			}
		}
		if list, _ := h.m.List(context.Background()); len(list) != 0 {
			t.Fatalf("%d records after refused creates", len(list))
		}
		if objs, _ := h.drv.List(context.Background()); len(objs) != 0 {
			t.Fatalf("%d driver objects after refused creates", len(objs))
		}
	})
}

func TestCreateAcceptsInputAtTheBounds(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		labels := manyLabels(MaxLabels, MaxLabelValueBytes)
		labels[strings.Repeat("k", MaxLabelKeyBytes)] = "é ü, with spaces and / = ." // replaces none: a new key
		delete(labels, "k0")
		labels["example.com/tier"] = ""
		delete(labels, "k1")
		// 1024 arguments, 128 KiB in all with their NULs.
		command := args(MaxCommandArgs, 127)
		total := 0
		for _, a := range command {
			total += len(a) + 1
		}
		command[1] += strings.Repeat("b", MaxCommandBytes-total)
		command[2] = "line\nbreaks\tand ünïcode are fine"
		spec := sandbox.Spec{Labels: labels, Command: command, Image: strings.Repeat("i", MaxImageBytes),
			Policy: "# " + strings.Repeat("x", MaxPolicyBytes-3) + "\n"}
		if err := validateInput("edge", strings.Repeat("r", MaxRequestIDBytes), spec); err != nil {
			t.Fatalf("input at the bounds refused: %v", err)
		}
		sb, created, err := h.m.Create(context.Background(), "edge", strings.Repeat("r", MaxRequestIDBytes), spec)
		if err != nil || !created {
			t.Fatalf("create at the bounds: created=%v err=%v", created, err)
		}
		h.waitPhase("edge", sandbox.PhaseReady)
		if got, _ := h.m.Get(context.Background(), sb.ID); len(got.Spec.Labels) != MaxLabels || len(got.Spec.Command) != MaxCommandArgs {
			t.Fatalf("stored %d labels and %d arguments", len(got.Spec.Labels), len(got.Spec.Command))
		}
		// An empty command is the image's own; the generic checks allow it.
		if _, _, err := h.m.Create(context.Background(), "image-cmd", "", sandbox.Spec{}); err != nil {
			t.Fatalf("create without a command: %v", err)
		}
	})
}

func TestExecRefusesAnInvalidCommand(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.create("box")
		h.waitPhase("box", sandbox.PhaseReady)
		for _, tc := range []struct {
			command []string
			want    string
		}{
			{[]string{"cat", "a\x00b"}, "exec command: argument 2 contains a NUL byte"},
			{[]string{""}, "exec command: the first argument, the program to run, is empty"},
			{[]string{"echo", "\xff"}, "exec command: argument 2 is not valid UTF-8"},
			{args(MaxCommandArgs+1, 1), "exec command: 1025 arguments"},
			{args(2, MaxCommandBytes), "exec command: 131079 bytes in all"},
		} {
			_, err := h.m.Exec(context.Background(), "box", driver.ExecOptions{Command: tc.command})
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `sandbox "box": `+tc.want) {
				t.Errorf("exec %.20q: err = %v, want invalid argument and %q", tc.command, err, tc.want)
			}
		}
		// A valid command gets past the checks to the driver, and runs.
		if code, err := h.m.Exec(context.Background(), "box", driver.ExecOptions{Command: []string{"true"}}); err != nil || code != 0 {
			t.Fatalf("valid exec: %d, %v; want it run by the fake driver", code, err)
		}
	})
}

func TestUpdateRefusesAnOversizedPolicy(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		sb := h.create("upd")
		h.waitPhase("upd", sandbox.PhaseReady)
		if _, err := h.m.Stop(context.Background(), "upd"); err != nil {
			t.Fatal(err)
		}
		h.waitPhase("upd", sandbox.PhaseStopped)
		before := len(h.journal(sb.ID))
		// 50 MiB of one YAML comment line, made in one allocation
		_, err := h.m.UpdatePolicy(context.Background(), "upd", strings.Repeat("#", 50<<20+2))
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `sandbox "upd": policy: 52428802 bytes, more than 262144`) {
			t.Fatalf("err = %v", err)
		}
		if after := len(h.journal(sb.ID)); after != before {
			t.Fatalf("a refused update wrote %d journal entries", after-before)
		}
		if _, err := h.m.UpdatePolicy(context.Background(), "upd", "version: 1\n"); err != nil {
			t.Fatalf("a small policy: %v", err)
		}
	})
}

func TestQuoteCutsLongValues(t *testing.T) {
	if got := quote(strings.Repeat("é", 100)); len(got) > 80 || !strings.HasSuffix(got, `"...`) {
		t.Fatalf("quote = %s", got)
	}
	if got := quote("short"); got != `"short"` {
		t.Fatalf("quote = %s", got)
	}
}

// credentialsPolicy binds secret gh-token to an inspected endpoint.
const credentialsPolicy = `version: 1
network_policies:
  gh:
    endpoints: [{host: api.github.com, port: 443, access: read-only}]
credentials:
  github:
    secret: gh-token
    env: GITHUB_TOKEN
    inject: {header: Authorization}
    endpoints: [{host: api.github.com, port: 443}]
`

// Credentials are refused by a gateway without an egress proxy, saying
// why, and a binding of a secret that does not exist is refused at
// create; Binders names who binds a secret, and whether it runs.
func TestCredentialsNeedEgressAndTheirSecrets(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.NoEgress = "the test's driver has none" })
		spec := sandbox.Spec{Command: []string{"sleep", "1d"}, Policy: credentialsPolicy}
		_, _, err := h.m.Create(context.Background(), "creds", "", spec)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "need an egress proxy") || !strings.Contains(err.Error(), "the test's driver has none") {
			t.Errorf("credentials without egress: %v", err)
		}

		exists := map[string]bool{}
		m := New(Config{Store: h.st, Driver: h.drv, Instance: "secrets", Gateway: gatewayID, Egress: nopEgress{},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			SecretExists: func(_ context.Context, _, name string) error {
				if !exists[name] {
					return errdefs.NotFound("secret %q not found", name)
				}
				return nil
			}})
		_, _, err = m.Create(context.Background(), "creds", "", spec)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `binds secret "gh-token", which does not exist`) {
			t.Errorf("a binding of a missing secret: %v", err)
		}
		exists["gh-token"] = true
		if _, _, err := m.Create(context.Background(), "creds", "", spec); err != nil {
			t.Fatal(err)
		}
		binders, err := m.Binders(context.Background(), "default", "gh-token")
		if err != nil || len(binders) != 1 || binders[0].Name != "creds" || !binders[0].Running {
			t.Errorf("Binders = %+v, %v; want creds, running", binders, err)
		}
		if none, _ := m.Binders(context.Background(), "default", "other"); len(none) != 0 {
			t.Errorf("Binders of an unbound secret = %+v", none)
		}
	})
}

// nopEgress is an egress proxy that serves nothing.
type nopEgress struct{}

func (nopEgress) Attached(driver.Ref) bool               { return true }
func (nopEgress) Refresh(string)                         {}
func (nopEgress) Forget(string)                          {}
func (nopEgress) InForce(context.Context, string) string { return "" }
