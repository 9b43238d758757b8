package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
	"github.com/corral-sandbox/corral/internal/lifecycle"
	"github.com/corral-sandbox/corral/internal/testenv"
)

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data)
}

// Invalid input gets a clear error and changes nothing.
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
	files, err := filepath.Glob(filepath.Join(stateDir(home), "objects", "*.json"))
	var data []byte
	if err == nil && len(files) == 1 {
		data, err = os.ReadFile(files[0])
	}
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
	setFaults(t, home, faults.Rule{Op: "inspect", Action: "fail", Error: "host unreachable"},
		faults.Rule{Op: "delete", Action: "fail", Error: "host unreachable"})
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
	setFaults(t, home, faults.Rule{Op: "delete", Action: "fail", Error: "host unreachable"})
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

// Issue 12: unbounded input is refused at create, naming the sandbox and
// the field, and nothing is recorded. The CLI passes what argv can carry
// (one argument is at most 128 KiB, so a 1 MB label value is sent over the
// API below).
func TestCreateRefusesUnboundedInput(t *testing.T) {
	home := t.TempDir()
	startGateway(t, home)
	mustCorral(t, home, "sandbox", "create", "--name", "kept")
	before := mustCorral(t, home, "sandbox", "list", "-o", "json")
	var manyLabels []string
	for i := range 10000 {
		manyLabels = append(manyLabels, "--label", fmt.Sprintf("k%d=v", i))
	}
	manyArgs := []string{"--"}
	for range lifecycle.MaxCommandArgs + 1 {
		manyArgs = append(manyArgs, "x")
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--label", "k=" + strings.Repeat("v", 100<<10)}, `sandbox "x": label "k": value is 102400 bytes, more than 256`},
		{manyLabels, `sandbox "x": labels: 10000 labels, more than 64`},
		{[]string{"--label", "a b=1"}, `sandbox "x": label key "a b": use letters`},
		{[]string{"--label", "k=line\nbreak"}, `sandbox "x": label "k" value: a control character at byte 4`},
		{manyArgs, `sandbox "x": command: 1025 arguments, more than 1024`},
		{[]string{"--", strings.Repeat("a", 70<<10), strings.Repeat("b", 70<<10)}, `sandbox "x": command: 143362 bytes in all, more than 131072`},
		{[]string{"--", "", "x"}, `sandbox "x": command: the first argument, the program to run, is empty`},
		{[]string{"--image", "busy box"}, `sandbox "x": image "busy box": white space at byte 4`},
		{[]string{"--image", strings.Repeat("i", 5000)}, `sandbox "x": image: 5000 bytes, more than 4096`},
		{[]string{"--request-id", strings.Repeat("r", 300)}, `sandbox "x": request id: 300 bytes, more than 256`},
	}
	for _, tc := range cases {
		args := append([]string{"sandbox", "create", "--name", "x"}, tc.args...)
		_, errOut, code := corral(t, home, args...)
		what := strings.Join(tc.args, " ")
		if len(what) > 60 {
			what = what[:60] + "..."
		}
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("create %s: exit %d, stderr %.300q, want exit 1 and %q", what, code, errOut, tc.want)
		}
		if strings.Count(strings.TrimSpace(errOut), "\n") > 0 || len(errOut) > 400 {
			t.Errorf("create %s: the error is not one short line: %.300q", what, errOut)
		}
	}
	if after := mustCorral(t, home, "sandbox", "list", "-o", "json"); after != before {
		t.Fatalf("refused creates changed the sandboxes:\nbefore %s\nafter %s", before, after)
	}
	if objs := fakeObjects(t, home); len(objs) != 1 {
		t.Fatalf("%d driver objects, want the one kept", len(objs))
	}
}

// What argv cannot carry (NUL, a megabyte) is refused at the API too.
func TestAPIRefusesInputTheCLICannotSend(t *testing.T) {
	home := t.TempDir()
	startGateway(t, home)
	mustCorral(t, home, "sandbox", "create", "--name", "box")
	before := mustCorral(t, home, "sandbox", "list", "-o", "json")
	c := api(t, home)
	ctx := context.Background()
	sleep := []string{"sleep", "1d"}
	cases := []struct {
		name string
		spec *corralv1.SandboxSpec
		want string
	}{
		{"nul-arg", &corralv1.SandboxSpec{Command: []string{"sh", "-c", "echo a\x00b"}}, `sandbox "nul-arg": command: argument 3 contains a NUL byte`},
		{"huge-label", &corralv1.SandboxSpec{Command: sleep, Labels: map[string]string{"k": strings.Repeat("v", 1<<20)}}, `sandbox "huge-label": label "k": value is 1048576 bytes, more than 256`},
		{"nul-label", &corralv1.SandboxSpec{Command: sleep, Labels: map[string]string{"k": "\x00"}}, `sandbox "nul-label": label "k" value: a control character at byte 0`},
		{"nul-image", &corralv1.SandboxSpec{Command: sleep, Image: "busybox\x00"}, `sandbox "nul-image": image "busybox\x00": a control character at byte 7`},
		{"big-policy", &corralv1.SandboxSpec{Command: sleep, Policy: "# " + strings.Repeat("x", 1<<20)}, `sandbox "big-policy": policy: 1048578 bytes, more than 262144`},
	}
	for _, tc := range cases {
		_, err := c.CreateSandbox(ctx, &corralv1.CreateSandboxRequest{Name: tc.name, Spec: tc.spec})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("create %s: %v, want InvalidArgument and %q", tc.name, err, tc.want)
		}
	}
	// exec with a NUL is refused before the driver is asked; a valid
	// command gets to the (fake) driver, and runs.
	for _, tc := range []struct {
		command []string
		code    codes.Code
		want    string
	}{
		{[]string{"cat", "a\x00b"}, codes.InvalidArgument, `sandbox "box": exec command: argument 2 contains a NUL byte`},
		{[]string{""}, codes.InvalidArgument, `sandbox "box": exec command: the first argument, the program to run, is empty`},
		{[]string{"true"}, codes.OK, ""},
	} {
		stream, err := c.ExecSandbox(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&corralv1.ExecRequest{Msg: &corralv1.ExecRequest_Start{Start: &corralv1.ExecStart{Name: "box", Command: tc.command}}}); err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("exec %q: %v, want %s and %q", tc.command, err, tc.code, tc.want)
		}
	}
	if after := mustCorral(t, home, "sandbox", "list", "-o", "json"); after != before {
		t.Fatalf("refused creates changed the sandboxes:\nbefore %s\nafter %s", before, after)
	}
}

// Issue 12: --driver auto (the default) on a host with no Docker engine
// answering and no native support refuses to start and says what to
// install, instead of running the fake driver. The host is made honestly:
// the gateway runs as a non-root user in a user namespace whose own
// user.max_user_namespaces is 0 (so it really cannot make the namespaces
// native needs), with --docker-host naming a socket nobody serves.
func TestAutoDriverWithNoRealOneRefusesToStart(t *testing.T) {
	testenv.RequireRoot(t) // to map ids into a user namespace
	for _, tool := range []string{"sh", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CORRAL_REQUIRE_ROOT") == "1" {
				t.Fatalf("CORRAL_REQUIRE_ROOT=1 but %s is missing: %v", tool, err)
			}
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	const base = 100000 // host ids of the namespace's 0..65535; the gateway is 1000 inside
	dir, home := homeFor(t, "corral-auto-", base+1000)
	script := `echo 0 > /proc/sys/user/max_user_namespaces || exit 99
exec setpriv --reuid 1000 --regid 1000 --clear-groups "$@"`
	cmd := exec.Command("sh", "-c", script, "sh", filepath.Join(dir, "corral"), "--home", home,
		"gateway", "--docker-host", "unix://"+filepath.Join(dir, "nobody.sock"))
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix://"+filepath.Join(dir, "nobody.sock"))
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: 65536}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: 65536}},
		// root of the namespace until setpriv: it may set its namespace's limit
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
		GidMappingsEnableSetgroups: true,
	}
	done := make(chan struct{})
	var out []byte
	go func() { out, _ = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("the gateway did not exit; it serves on no driver:\n%s", out)
	}
	code := cmd.ProcessState.ExitCode()
	if code == 99 {
		if os.Getenv("CORRAL_REQUIRE_ROOT") == "1" {
			t.Fatalf("CORRAL_REQUIRE_ROOT=1 but user.max_user_namespaces cannot be set in a user namespace here: %s", out)
		}
		t.Skipf("cannot set user.max_user_namespaces in a user namespace here: %s", out)
	}
	if code != 1 {
		t.Fatalf("gateway exit %d, want 1:\n%s", code, out)
	}
	t.Logf("the gateway said: %s", out)
	for _, want := range []string{"--driver auto found no compute driver", "nobody.sock", "max_user_namespaces=0",
		"apt-get install docker.io", "start dockerd", "as root", "unprivileged user namespaces"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the gateway's error lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "fake driver") {
		t.Errorf("the gateway mentions the fake driver as a choice:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(home, "fake")); !os.IsNotExist(err) {
		t.Errorf("the fake driver's state directory exists: %v", err)
	}
	if _, err := os.Stat(filepath.Join(home, "corral.sock")); !os.IsNotExist(err) {
		t.Errorf("the API socket exists: %v", err)
	}
}

// `sandbox list` pages for its user: every sandbox by default, --limit
// of them with the token to go on, filtered by --label and --phase.
func TestListPagesAndFiltersThroughCLI(t *testing.T) {
	home := t.TempDir()
	startGateway(t, home)
	for i, team := range []string{"a", "b", "a"} {
		mustCorral(t, home, "sandbox", "create", "--name", fmt.Sprintf("p%d", i), "--label", "team="+team, "--", "sleep", "1d")
		time.Sleep(2 * time.Millisecond) // creation times apart: the list's order
	}
	names := func(out string) string {
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] { // the table, without its header
			got = append(got, strings.Fields(line)[0])
		}
		return strings.Join(got, " ")
	}
	if out := mustCorral(t, home, "sandbox", "list"); names(out) != "p0 p1 p2" {
		t.Errorf("list:\n%s", out)
	}
	out, errOut, code := corral(t, home, "sandbox", "list", "--limit", "2")
	token := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(errOut), "more sandboxes match: add --continue"))
	if code != 0 || names(out) != "p0 p1" || token == "" || strings.ContainsAny(token, " \n") {
		t.Fatalf("list --limit 2: exit %d\n%s%s", code, out, errOut)
	}
	if out := mustCorral(t, home, "sandbox", "list", "--continue", token); names(out) != "p2" {
		t.Errorf("list --continue:\n%s", out)
	}
	if out := mustCorral(t, home, "sandbox", "list", "-l", "team=a"); names(out) != "p0 p2" {
		t.Errorf("list -l team=a:\n%s", out)
	}
	waitPhase(t, api(t, home), "p2", "ready")
	if out := mustCorral(t, home, "sandbox", "list", "--phase", "ready", "--label", "team=b"); names(out) != "p1" {
		t.Errorf("list --phase ready --label team=b:\n%s", out)
	}
	if _, errOut, code := corral(t, home, "sandbox", "list", "--phase", "sleepy"); code == 0 || !strings.Contains(errOut, `phase "sleepy"`) {
		t.Errorf("list --phase sleepy: exit %d, %s; want the phase refused", code, errOut)
	}
}
