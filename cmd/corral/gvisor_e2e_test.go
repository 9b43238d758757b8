package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/testenv"
)

// Issue 18 on Docker: a sandbox on the gVisor tier through the CLI, as a
// user drives it: doctor says the tier is there, the kernel inside is
// gVisor's, exec, logs, cp both ways, a forwarded port, the restart
// policy; stop and start keep the workdir;
// delete leaves nothing; a policy gVisor cannot hold is refused at create
// and leaves no record.
func TestDockerGVisorThroughCLI(t *testing.T) {
	testenv.RequireDocker(t)
	home, label := t.TempDir(), newLabel(t)
	dockerGateway(t, home, label)
	if out := mustCorral(t, home, "gateway", "doctor"); !strings.Contains(out, "gvisor") || !strings.Contains(strings.Fields(out[strings.Index(out, "gvisor"):])[1], "yes") {
		t.Fatalf("doctor does not list the gVisor tier as available:\n%s", out)
	}
	dir := t.TempDir()
	pol := filepath.Join(dir, "gvisor.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\nisolation: gvisor\nlimits: {pids: 64}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCorral(t, home, "sandbox", "create", "--name", "gv", "--policy", pol, "--", "sh", "-c", "echo hello from gvisor; exec sleep 1000")
	if out := mustCorral(t, home, "sandbox", "exec", "gv", "--", "cat", "/proc/version"); !strings.Contains(out, "Linux version 4.4.0") {
		t.Errorf("/proc/version = %q; want gVisor's kernel", out) // the host runs a newer one
	}
	if host, _ := os.ReadFile("/proc/version"); strings.Contains(string(host), "Linux version 4.4.0") {
		t.Fatalf("the host's kernel is what gVisor claims to be: the check above proves nothing")
	}
	if got := mustCorral(t, home, "sandbox", "get", "gv"); !strings.Contains(got, "gVisor (runtime runsc") || !strings.Contains(got, "pids 64 (RLIMIT_NPROC") {
		t.Errorf("get does not show the gVisor tier's protections:\n%s", got)
	}
	if logs := mustCorral(t, home, "sandbox", "logs", "gv"); !strings.Contains(logs, "hello from gvisor") {
		t.Errorf("logs = %q", logs)
	}
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("through cp\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	mustCorral(t, home, "sandbox", "cp", in, "gv:/sandbox/file")
	if out := mustCorral(t, home, "sandbox", "exec", "gv", "--", "cat", "/sandbox/file"); out != "through cp\n" {
		t.Errorf("copied in: %q", out)
	}
	mustCorral(t, home, "sandbox", "exec", "gv", "--", "sh", "-c", "echo kept > /sandbox/file")
	out := filepath.Join(dir, "out.txt")
	mustCorral(t, home, "sandbox", "cp", "gv:/sandbox/file", out)
	if data, err := os.ReadFile(out); err != nil || string(data) != "kept\n" {
		t.Errorf("copied out: %q, %v", data, err)
	}
	run := func(args ...string) string { return mustCorral(t, home, args...) }
	createWeb(t, run, "web", "--policy", pol)
	f := portForward(t, nil, 1, "--home", home, "sandbox", "port-forward", "web", "8080")
	waitServed(t, f.addrs[0], "hello from web\n")
	mustCorral(t, home, "sandbox", "create", "--name", "retry", "--policy", pol, "--restart", "on_failure", "--max-restarts", "1", "--", "sh", "-c", "exit 1")
	waitReason(t, home, "retry", "limit of 1 restarts")

	mustCorral(t, home, "sandbox", "stop", "gv")
	startKeepsWorkdir(t, home, "gv")
	mustCorral(t, home, "sandbox", "delete", "--all")
	if got := containersOf(t, label); len(got) != 0 {
		t.Fatalf("containers left after delete: %v", got)
	}

	hard := filepath.Join(dir, "hard.yaml")
	if err := os.WriteFile(hard, []byte("version: 1\nisolation: gvisor\nfilesystem_policy: {read_only: [/bin]}\nlandlock: {compatibility: hard_requirement}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := corral(t, home, "sandbox", "create", "--name", "hard", "--policy", hard, "--", "sleep", "10")
	if code == 0 || !strings.Contains(errOut, "gVisor has no Landlock") {
		t.Errorf("create with Landlock required on gVisor: exit %d, %q; want it refused, saying why", code, errOut)
	}
	if _, _, code := corral(t, home, "sandbox", "get", "hard"); code == 0 {
		t.Errorf("a refused create left a record")
	}
}
