package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver/fake"
)

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data)
}

// Must hold 4: invalid input gets a clear error and changes nothing.
func TestInvalidRequestsChangeNothing(t *testing.T) {
	home := t.TempDir()
	startGateway(t, home)
	mustCorral(t, home, "sandbox", "create", "--name", "taken")
	before := mustCorral(t, home, "sandbox", "list", "-o", "json")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"sandbox", "create", "--name", "Bad_Name"}, `invalid sandbox name "Bad_Name"`},
		{[]string{"sandbox", "create", "--name", "-lead"}, `invalid sandbox name "-lead"`},
		{[]string{"sandbox", "create", "--name", strings.Repeat("a", 64)}, "longer than 63"},
		{[]string{"sandbox", "create"}, "sandbox name is empty"},
		{[]string{"sandbox", "create", "--name", "taken"}, `sandbox "taken" already exists`},
		{[]string{"sandbox", "create", "--name", "x", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"sandbox", "create", "--name", "x", "--label", "novalue"}, `--label "novalue": want key=value`},
		{[]string{"sandbox", "create", "--name", "x", "--label", "corral.id=1"}, "reserved"},
		{[]string{"sandbox", "create", "--name", "x", "--policy", "/no/such/file"}, "--policy"},
		{[]string{"sandbox", "create", "--name", "x", "-o", "xml"}, `-o "xml"`},
		{[]string{"sandbox", "get", "nope"}, `sandbox "nope" not found`},
		{[]string{"sandbox", "delete", "nope"}, `sandbox "nope" not found`},
		{[]string{"sandbox", "stop", "nope"}, `sandbox "nope" not found`},
		{[]string{"sandbox", "start", "nope"}, `sandbox "nope" not found`},
		{[]string{"sandbox", "history", "nope"}, `sandbox "nope" not found`},
		{[]string{"sandbox", "delete"}, "no sandbox named"},
		{[]string{"sandbox", "delete", "taken", "--all"}, "not both"},
		{[]string{"sandbox", "frobnicate"}, "unknown command"},
		{[]string{"--gateway", "tcp://1.2.3.4:1", "sandbox", "list"}, "want unix://"},
	}
	for _, tc := range cases {
		out, errOut, code := corral(t, home, tc.args...)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("corral %s: exit %d, stderr %q, want exit 1 and %q (stdout %q)", strings.Join(tc.args, " "), code, errOut, tc.want, out)
		}
		if n := strings.Count(strings.TrimSpace(errOut), "\n"); n > 0 && !strings.Contains(errOut, "Usage") {
			t.Errorf("corral %s: error is %d lines, want one: %q", strings.Join(tc.args, " "), n+1, errOut)
		}
	}
	if after := mustCorral(t, home, "sandbox", "list", "-o", "json"); after != before {
		t.Fatalf("invalid requests changed the sandboxes:\nbefore %s\nafter %s", before, after)
	}
}

func TestNoGatewayIsAClearError(t *testing.T) {
	_, errOut, code := corral(t, t.TempDir(), "sandbox", "list")
	if code != 1 || !strings.Contains(errOut, "cannot reach the gateway") {
		t.Fatalf("exit %d, %q", code, errOut)
	}
}

// gatewayFails runs a gateway that must refuse to start, and returns its output.
func gatewayFails(t *testing.T, home string, args ...string) string {
	t.Helper()
	g := launch(t, home, args...)
	if code := g.exitCode(30 * time.Second); code != 1 {
		t.Fatalf("gateway exit code %d, want 1\n%s", code, g.logs.String())
	}
	return g.logs.String()
}

func TestGatewayRefusesBadHomesAndStores(t *testing.T) {
	t.Run("home is a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		os.WriteFile(file, []byte("x"), 0o600)
		if out := gatewayFails(t, file); !strings.Contains(out, "not a directory") {
			t.Fatalf("said %q", out)
		}
	})
	t.Run("home under a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		os.WriteFile(file, []byte("x"), 0o600)
		if out := gatewayFails(t, filepath.Join(file, "home")); !strings.Contains(out, "not a directory") {
			t.Fatalf("said %q", out)
		}
	})
	t.Run("corrupt store", func(t *testing.T) {
		home := t.TempDir()
		db := filepath.Join(home, "corral.db")
		os.WriteFile(db, []byte(strings.Repeat("this is not sqlite ", 500)), 0o600)
		sum := fileHash(t, db)
		out := gatewayFails(t, home)
		if !strings.Contains(out, "not a SQLite database") || !strings.Contains(out, db) {
			t.Fatalf("said %q", out)
		}
		if fileHash(t, db) != sum {
			t.Fatal("the corrupt store was modified")
		}
	})
	t.Run("store is a directory", func(t *testing.T) {
		home := t.TempDir()
		os.Mkdir(filepath.Join(home, "corral.db"), 0o700)
		if out := gatewayFails(t, home); !strings.Contains(out, "is a directory") {
			t.Fatalf("said %q", out)
		}
	})
	t.Run("newer schema", func(t *testing.T) {
		home := t.TempDir()
		g := startGateway(t, home)
		mustCorral(t, home, "sandbox", "create", "--name", "keep")
		g.signal(15)
		g.exitCode(30 * time.Second)
		db := filepath.Join(home, "corral.db")
		conn, err := sql.Open("sqlite", db)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec("UPDATE schema_version SET version = 99"); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		sum := fileHash(t, db)
		out := gatewayFails(t, home)
		if !strings.Contains(out, "schema version 99 is newer") {
			t.Fatalf("said %q", out)
		}
		if fileHash(t, db) != sum {
			t.Fatal("the newer store was modified")
		}
	})
	t.Run("unknown config key", func(t *testing.T) {
		home := t.TempDir()
		cfg := filepath.Join(home, "corral.toml")
		os.WriteFile(cfg, []byte("compute_driver = \"fake\"\nshutdown_timout = \"5s\"\n[drivers.docker]\nsocket_path = \"/x\"\nbogus = 1\n"), 0o600)
		out := gatewayFails(t, home, "--config", cfg)
		if !strings.Contains(out, `unknown key "shutdown_timout", "drivers.docker.bogus"`) {
			t.Fatalf("said %q", out)
		}
	})
	t.Run("bad config value", func(t *testing.T) {
		home := t.TempDir()
		cfg := filepath.Join(home, "corral.toml")
		os.WriteFile(cfg, []byte("image_pull_policy = \"sometimes\"\n"), 0o600)
		if out := gatewayFails(t, home, "--config", cfg); !strings.Contains(out, `image_pull_policy "sometimes"`) {
			t.Fatalf("said %q", out)
		}
	})
	t.Run("unknown driver", func(t *testing.T) {
		if out := gatewayFails(t, t.TempDir(), "--driver", "warp"); !strings.Contains(out, `unknown compute driver "warp"`) {
			t.Fatalf("said %q", out)
		}
	})
}

func TestConfigFileIsReadAndFlagsWin(t *testing.T) {
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, "corral.toml"), []byte("default_image = \"from-file:1\"\nsandbox_label = \"corral.filelabel\"\n"), 0o600)
	startGateway(t, home, "--default-image", "from-flag:2")
	out := mustCorral(t, home, "sandbox", "create", "--name", "img", "-o", "json")
	if !strings.Contains(out, `"image": "from-flag:2"`) {
		t.Fatalf("flag did not win over the file: %s", out)
	}
	data, err := os.ReadFile(filepath.Join(stateDir(home), "objects.json"))
	if err != nil || !strings.Contains(string(data), "corral.filelabel") {
		t.Fatalf("sandbox_label from the file not used: %s %v", data, err)
	}
}

func TestSocketIsPrivate(t *testing.T) {
	home := t.TempDir()
	startGateway(t, home)
	fi, err := os.Stat(filepath.Join(home, "corral.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Fatalf("socket mode %o, want 600", perm)
	}
}

func TestAssumeGoneAndDoctorForADriverThatCannotAnswer(t *testing.T) {
	home := t.TempDir()
	startGateway(t, home, "--orphan-grace", "1h")
	id := strings.TrimSpace(mustCorral(t, home, "sandbox", "create", "--name", "stuck"))
	setFaults(t, home, fake.Rule{Op: "inspect", Action: "fail", Error: "host unreachable"},
		fake.Rule{Op: "delete", Action: "fail", Error: "host unreachable"})
	mustCorral(t, home, "sandbox", "delete", "stuck", "--detach")
	waitReason(t, home, "stuck", "host unreachable")
	if _, errOut, code := corral(t, home, "sandbox", "delete", "stuck", "--force", "--assume-gone"); code != 1 || !strings.Contains(errOut, "--reason") {
		t.Fatalf("--assume-gone without a reason: exit %d %q", code, errOut)
	}
	if _, errOut, code := corral(t, home, "sandbox", "delete", "stuck", "--assume-gone", "--reason", "x"); code != 1 || !strings.Contains(errOut, "--force") {
		t.Fatalf("--assume-gone without --force: exit %d %q", code, errOut)
	}
	mustCorral(t, home, "sandbox", "delete", "stuck", "--force", "--assume-gone", "--reason", "the host burned down")
	if _, errOut, code := corral(t, home, "sandbox", "get", "stuck"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("record still there: %q", errOut)
	}
	setFaults(t, home, fake.Rule{Op: "delete", Action: "fail", Error: "host unreachable"})
	out := mustCorral(t, home, "gateway", "doctor")
	if !strings.Contains(out, id) || !strings.Contains(out, "without a record") {
		t.Fatalf("doctor did not report the object left behind:\n%s", out)
	}
	st := openStoreLive(t, home)
	evs, err := st.ListGatewayEvents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs {
		if ev.Kind == "assumed_gone" && ev.Subject == id && strings.Contains(ev.Detail, "local socket user") && strings.Contains(ev.Detail, "the host burned down") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no assumed_gone entry with who and why in %+v", evs)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	home := t.TempDir()
	addr := freePort(t)
	startGateway(t, home, "--metrics-listen", addr)
	mustCorral(t, home, "sandbox", "create", "--name", "counted")
	mustCorral(t, home, "sandbox", "stop", "counted")
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`corral_operations_total{kind="driver.create",state="succeeded"} 1`,
		`corral_operations_total{kind="driver.stop",state="succeeded"} 1`,
		`corral_driver_call_seconds_count{kind="driver.start"} 1`,
		`corral_reconcile_lag_seconds_count 2`,
		`corral_interrupted_operations_total 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
