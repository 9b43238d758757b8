package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// On Docker, end to end: a sandbox whose workload
// runs as root puts a symlink to a host file, then FIFOs, where its
// supervisor reports. `get` prints no host content and returns at once,
// the gateway keeps answering, and delete (graceful and forced) completes
// within its timeout without touching the host file.
func TestDockerHostileReportsCannotReachOrBlockTheGateway(t *testing.T) {
	testenv.RequireDocker(t)
	home, label := t.TempDir(), newLabel(t)
	dockerGateway(t, home, label)
	dir := t.TempDir()
	marker, content := filepath.Join(dir, "marker"), "corral-host-marker-"+sandbox.NewID()
	pol := filepath.Join(dir, "root.yaml")
	for path, data := range map[string]string{marker: content + "\n", pol: "version: 1\nprocess: {run_as_user: 0}\n"} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	timed := func(t *testing.T, limit time.Duration, args ...string) string {
		t.Helper()
		start := time.Now()
		out, errOut, code := corral(t, home, args...)
		if took := time.Since(start); code != 0 || took > limit {
			t.Fatalf("corral %s: exit %d after %s (limit %s)\n%s%s", strings.Join(args, " "), code, took.Round(time.Millisecond), limit, out, errOut)
		}
		if strings.Contains(out+errOut, content) {
			t.Fatalf("corral %s printed the host file:\n%s%s", strings.Join(args, " "), out, errOut)
		}
		return out
	}
	for name, verb := range map[string]string{"hostile": "delete", "hostile-forced": "delete --force"} {
		t.Run(verb, func(t *testing.T) {
			mustCorral(t, home, "sandbox", "create", "--name", name, "--policy", pol, "--", "sleep", "1000")
			mustCorral(t, home, "sandbox", "exec", name, "--", "ln", "-sf", marker, "/.corral/run/protections")
			for _, o := range []string{"table", "json"} {
				timed(t, 10*time.Second, "sandbox", "get", name, "-o", o)
			}
			mustCorral(t, home, "sandbox", "exec", name, "--", "sh", "-c",
				"cd /.corral/run && rm -f protections failed ready && mkfifo protections failed && ln -s "+marker+" ready")
			for _, o := range []string{"table", "json"} {
				timed(t, 10*time.Second, "sandbox", "get", name, "-o", o)
			}
			timed(t, 10*time.Second, "sandbox", "list")
			timed(t, 40*time.Second, append([]string{"sandbox"}, append(strings.Fields(verb), "--timeout", "30s", name)...)...)
			if got := containersOf(t, label); len(got) != 0 {
				t.Fatalf("containers left after %s: %v", verb, got)
			}
			if data, err := os.ReadFile(marker); err != nil || string(data) != content+"\n" {
				t.Fatalf("the host file after %s: %q, %v", verb, data, err)
			}
		})
	}
}

// On Docker, a missing image that cannot be pulled
// fails the create within 10 s naming the image (exit 1), and a reference
// that does not parse is refused before any sandbox is recorded.
func TestDockerMissingImageFailsFast(t *testing.T) {
	testenv.RequireDocker(t)
	home, label := t.TempDir(), newLabel(t)
	dockerGateway(t, home, label, "--image-pull-policy", "if_not_present")
	missing := testenv.Registry(t) + "/nosuch:1" // on loopback: no test pulls from the internet
	start := time.Now()
	out, errOut, code := corral(t, home, "sandbox", "create", "--name", "nosuch", "--image", missing, "--", "sleep", "1")
	if took := time.Since(start); code != 1 || took > 10*time.Second || !strings.Contains(errOut, missing) {
		t.Fatalf("create --image %s: exit %d after %s: %s%s; want exit 1 within 10 s naming the image", missing, code, took.Round(time.Millisecond), out, errOut)
	}
	t.Logf("refused after %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(errOut))
	for _, image := range []string{"x/../../containers/json", "busybox?all=1", "busybox#x", "busybox%2e%2e"} {
		out, errOut, code := corral(t, home, "sandbox", "create", "--name", "bad", "--image", image, "--", "sleep", "1")
		if code != 1 || !strings.Contains(errOut, image) || !strings.Contains(errOut, "not a valid image reference") {
			t.Errorf("create --image %q: exit %d: %s%s; want it refused, naming the image", image, code, out, errOut)
		}
	}
	if out := mustCorral(t, home, "sandbox", "list"); strings.Contains(out, "bad") {
		t.Errorf("an invalid image made a record:\n%s", out)
	}
	mustCorral(t, home, "sandbox", "delete", "--all")
}

// A root workload without file lists cannot open the memory of the
// sandbox's PID 1 (its supervisor), nor of another exec's command, for
// writing: code written there would run outside the policy (PID 1 is
// outside the seccomp filter; an exec stage or spare has not applied the
// policy yet). No ptrace call is needed to try, so seccomp alone does not
// stop it.
func TestDockerWorkloadCannotReachOtherProcessesMemory(t *testing.T) {
	testenv.RequireDocker(t)
	home, label := t.TempDir(), newLabel(t)
	dockerGateway(t, home, label)
	pol := rootPolicy(t)
	mustCorral(t, home, "sandbox", "create", "--name", "prober", "--policy", pol, "--", "sleep", "1000")
	go corral(t, home, "sandbox", "exec", "prober", "--", "sleep", "77") // another exec's command, to aim at
	var sleeper string
	testenv.Eventually(t, 20*time.Second, func() error {
		out, _, _ := corral(t, home, "sandbox", "exec", "prober", "--", "sh", "-c", "for p in /proc/[0-9]*; do [ \"$(cat $p/cmdline 2>/dev/null | tr '\\0' ' ')\" = 'sleep 77 ' ] && echo ${p#/proc/}; done")
		if sleeper = strings.TrimSpace(out); sleeper == "" {
			return fmt.Errorf("the other exec's sleep is not running yet")
		}
		return nil
	})
	for _, pid := range []string{"1", sleeper} {
		out, errOut, code := corral(t, home, "sandbox", "exec", "prober", "--", "sh", "-c",
			"exec 3<>/proc/"+pid+"/mem && echo OPENED")
		if code == 0 || strings.Contains(out, "OPENED") {
			t.Errorf("a root workload opened /proc/%s/mem for writing (exit %d):\n%s%s", pid, code, out, errOut)
		}
	}
	if prot := getJSON(t, home, "prober")["protections"]; !strings.Contains(fmt.Sprint(prot), "landlock") {
		t.Errorf("protections %v; want the Landlock domain named", prot)
	}
	mustCorral(t, home, "sandbox", "delete", "--force", "prober")
}

// A root workload that fills its run directory (its supervisor's reports,
// a bind of the gateway's home) fills a tmpfs of a few megabytes, not the
// disk of the gateway's store; the sandbox is then deleted as any other.
func TestDockerRootWorkloadCannotFillTheGatewaysDisk(t *testing.T) {
	testenv.RequireDocker(t)
	testenv.RequireRoot(t)
	home, label := t.TempDir(), newLabel(t)
	dockerGateway(t, home, label)
	pol := rootPolicy(t)
	id := strings.TrimSpace(mustCorral(t, home, "sandbox", "create", "--name", "filler", "--policy", pol, "--", "sleep", "1000"))
	out, _, _ := corral(t, home, "sandbox", "exec", "filler", "--", "sh", "-c",
		"dd if=/dev/zero of=/.corral/run/fill bs=64k count=1600 2>&1; echo dd exit $?")
	if !strings.Contains(out, "No space left") || strings.Contains(out, "dd exit 0") {
		t.Errorf("dd of 100 MiB into the run directory:\n%s\nwant it stopped by a full file system", out)
	}
	runDir := filepath.Join(home, "docker", "run", id+"-1")
	var fs syscall.Statfs_t
	if err := syscall.Statfs(runDir, &fs); err != nil {
		t.Fatal(err)
	}
	if size := fs.Blocks * uint64(fs.Bsize); fs.Type != 0x01021994 || size > 8<<20 {
		t.Errorf("the run directory on the host: file system type %#x of %d bytes; want a tmpfs of a few megabytes", fs.Type, size)
	}
	mustCorral(t, home, "sandbox", "delete", "filler")
	if _, err := os.Stat(runDir); !os.IsNotExist(err) {
		t.Errorf("the run directory after delete: %v; want it gone", err)
	}
}

// rootPolicy writes a policy whose workload runs as root and returns its
// file.
func rootPolicy(t *testing.T) string {
	t.Helper()
	pol := filepath.Join(t.TempDir(), "root.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\nprocess: {run_as_user: 0}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return pol
}
