package main

import (
	"archive/tar"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// nativeWorkdir is the host directory of a native sandbox's /sandbox.
func nativeWorkdir(home, id string) string {
	return filepath.Join(home, "native", "sandboxes", id, "workdir")
}

// treeScript makes 1,000 files in /sandbox, in 17 directories, each with
// its own contents, mode and modification time (to the nanosecond), with
// symlinks (one out of /sandbox), a hard link and an empty directory.
const treeScript = `set -e; cd /sandbox
for i in $(seq 1 1000); do
	d=d$((i % 17)); mkdir -p $d
	printf 'file %d %0*d' $i $((i % 50)) 0 > $d/f$i
	chmod 6$((i % 8))$((i % 5)) $d/f$i
	touch -d @$((1700000000 + i)).$((100000000 + i)) $d/f$i
done
ln -s f17 d0/rel-link; ln -s /etc/hostname abs-link; ln d1/f1 d1/hard-link
mkdir -m 711 empty; chmod 750 d2; touch -d @1600000000.5 d3`

// A snapshot of a sandbox with 1,000 files restores byte-identical
// (contents, modes, links, mtimes) on the other driver, both ways, through
// export and import; the restored files are the sandbox user's to write;
// a fork of 5 gives 5 independent sandboxes; a hostile archive is refused
// and nothing of it is listed.
func TestSnapshotAcrossDrivers(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireDocker(t)
	nhome, dhome, dir := t.TempDir(), t.TempDir(), t.TempDir()
	nativeGateway(t, nhome)
	dockerGateway(t, dhome, newLabel(t))

	src := strings.TrimSpace(mustCorral(t, nhome, "sandbox", "create", "--name", "src", "--", "sleep", "1d"))
	mustCorral(t, nhome, "sandbox", "exec", "src", "--", "sh", "-c", treeScript)
	want := testenv.DescribeTree(t, nativeWorkdir(nhome, src))
	if len(want) < 1000 {
		t.Fatalf("the tree has %d entries", len(want))
	}
	out := mustCorral(t, nhome, "sandbox", "snapshot", "src", "base")
	if !strings.Contains(out, fmt.Sprintf("base: %d files", len(want))) {
		t.Errorf("snapshot printed %q", out)
	}
	mustCorral(t, nhome, "sandbox", "exec", "src", "--", "sh", "-c", "echo later > /sandbox/later")
	if out := mustCorral(t, nhome, "sandbox", "get", "src", "-o", "json"); !strings.Contains(out, `"phase": "ready"`) {
		t.Fatalf("the snapshot left its sandbox:\n%s", out)
	}

	// native → Docker
	archive := filepath.Join(dir, "base.tar")
	mustCorral(t, nhome, "snapshot", "export", "base", archive)
	mustCorral(t, dhome, "snapshot", "import", archive)
	dst := strings.TrimSpace(mustCorral(t, dhome, "sandbox", "create", "--name", "dst", "--from-snapshot", "base",
		"--image", testenv.TestImage))
	testenv.SameTree(t, "native → Docker", want, testenv.DescribeTree(t, dockerWorkdir(t, dst)))
	if out := mustCorral(t, dhome, "sandbox", "exec", "dst", "--", "sh", "-c", "id -u; echo more >> /sandbox/d1/f1; cat /sandbox/d1/f1"); out != "1000\nfile 1 0more\n" {
		t.Errorf("the restored files, written by the sandbox's user: %q", out)
	}
	if out := mustCorral(t, dhome, "sandbox", "history", "dst"); !strings.Contains(out, "driver.seed") {
		t.Errorf("the journal of a sandbox made from a snapshot:\n%s", out)
	}

	// Docker → native
	mustCorral(t, dhome, "sandbox", "snapshot", "dst", "back")
	back := testenv.DescribeTree(t, dockerWorkdir(t, dst))
	archive = filepath.Join(dir, "back.tar")
	mustCorral(t, dhome, "snapshot", "export", "back", archive)
	mustCorral(t, nhome, "snapshot", "import", archive, "--name", "from-docker")
	again := strings.TrimSpace(mustCorral(t, nhome, "sandbox", "create", "--name", "again", "--from-snapshot", "from-docker", "--image", "host"))
	testenv.SameTree(t, "Docker → native", back, testenv.DescribeTree(t, nativeWorkdir(nhome, again)))

	// fork of 5: each its own /sandbox
	ids := strings.Fields(mustCorral(t, nhome, "sandbox", "fork", "src", "--count", "5", "--name-prefix", "f"))
	if len(ids) != 5 {
		t.Fatalf("fork printed %d ids", len(ids))
	}
	for i := 1; i <= 5; i++ {
		mustCorral(t, nhome, "sandbox", "exec", fmt.Sprintf("f-%d", i), "--", "sh", "-c", fmt.Sprintf("echo %d > /sandbox/who", i))
	}
	for i := 1; i <= 5; i++ {
		out := mustCorral(t, nhome, "sandbox", "exec", fmt.Sprintf("f-%d", i), "--", "sh", "-c", "cat /sandbox/who /sandbox/later")
		if out != fmt.Sprintf("%d\nlater\n", i) {
			t.Errorf("fork %d reads %q", i, out)
		}
	}
	if _, err := os.Stat(filepath.Join(nativeWorkdir(nhome, src), "who")); err == nil {
		t.Error("a fork's write is seen in the sandbox it was forked from")
	}
	if out := mustCorral(t, nhome, "snapshot", "list"); strings.Contains(out, "fork-") {
		t.Errorf("the fork's snapshot is left:\n%s", out)
	}

	// a hostile archive
	evil := filepath.Join(dir, "evil.tar")
	f, err := os.Create(evil)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	meta := []byte(`{"version":1,"name":"evil","spec":{}}`)
	tw.WriteHeader(&tar.Header{Name: "corral-snapshot.json", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(meta))})
	tw.Write(meta)
	tw.WriteHeader(&tar.Header{Name: "sandbox/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "sandbox/etc", Typeflag: tar.TypeSymlink, Linkname: "/etc"})
	tw.WriteHeader(&tar.Header{Name: "sandbox/etc/corral-evil", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("x"))
	tw.Close()
	f.Close()
	_, errOut, code := corral(t, nhome, "snapshot", "import", evil)
	if code == 0 || !strings.Contains(errOut, `entry "sandbox/etc/corral-evil"`) || !strings.Contains(errOut, "leads outside") {
		t.Errorf("import of a hostile archive: %d %q", code, errOut)
	}
	if _, err := os.Stat("/etc/corral-evil"); err == nil {
		os.Remove("/etc/corral-evil")
		t.Fatal("a hostile archive wrote /etc/corral-evil")
	}
	if out := mustCorral(t, nhome, "snapshot", "list"); strings.Contains(out, "evil") {
		t.Errorf("a refused import is listed:\n%s", out)
	}

	// deleting a snapshot leaves the sandboxes made from it whole
	mustCorral(t, nhome, "snapshot", "delete", "base", "from-docker")
	testenv.SameTree(t, "after the snapshot's delete", back, testenv.DescribeTree(t, nativeWorkdir(nhome, again)))
	for _, h := range []string{nhome, dhome} {
		mustCorral(t, h, "sandbox", "delete", "--all")
	}
}

// A gateway killed in the middle of a snapshot (its sandbox paused for the
// copy) lists no half snapshot after its restart and has resumed the
// sandbox; one killed in the middle of a restore puts the files in again
// and the sandbox converges with them.
func TestSnapshotAndRestoreCutShortBySIGKILL(t *testing.T) {
	home := t.TempDir()
	g := startGateway(t, home)
	id := strings.TrimSpace(mustCorral(t, home, "sandbox", "create", "--name", "box", "--", "sleep", "1d"))
	wd := filepath.Join(stateDir(home), "workdirs", id)
	if err := os.MkdirAll(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wd, "file"), []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	setFaults(t, home, faults.Rule{Op: "workdir", Sandbox: id, Action: "hold"})
	snap := exec.Command(bin, "--home", home, "sandbox", "snapshot", "box", "s1")
	if err := snap.Start(); err != nil {
		t.Fatal(err)
	}
	defer snap.Wait()
	waitHeld(t, home, "workdir", id)
	if sb := getJSON(t, home, "box"); sb["phase"] != "paused" {
		t.Fatalf("during its snapshot, the sandbox is %v", sb["phase"])
	}
	g.signal(syscall.SIGKILL)
	g.exitCode(30 * time.Second)
	setFaults(t, home)
	g = startGateway(t, home)
	if out := mustCorral(t, home, "snapshot", "list"); strings.Contains(out, "s1") {
		t.Fatalf("a snapshot cut short is listed:\n%s", out)
	}
	if _, errOut, code := corral(t, home, "snapshot", "get", "s1"); code == 0 || !strings.Contains(errOut, `snapshot "s1" not found`) {
		t.Fatalf("snapshot get of one cut short: %d %q", code, errOut)
	}
	waitPhase(t, api(t, home), "box", "ready")
	if sb := getJSON(t, home, "box"); sb["generation"] != float64(1) || sb["desired_state"] != "running" {
		t.Fatalf("after the restart, the sandbox is %v", sb)
	}

	mustCorral(t, home, "sandbox", "snapshot", "box", "s1")
	setFaults(t, home, faults.Rule{Op: "seed", Action: "hold"})
	held := strings.TrimSpace(mustCorral(t, home, "sandbox", "create", "--name", "copy", "--from-snapshot", "s1", "--detach"))
	waitHeld(t, home, "seed", held)
	g.signal(syscall.SIGKILL)
	g.exitCode(30 * time.Second)
	setFaults(t, home)
	startGateway(t, home)
	copyID := waitPhase(t, api(t, home), "copy", "ready").Id
	data, err := os.ReadFile(filepath.Join(stateDir(home), "workdirs", copyID, "file"))
	if err != nil || string(data) != "kept\n" {
		t.Fatalf("the restored file: %q, %v", data, err)
	}
	hist := mustCorral(t, home, "sandbox", "history", "copy")
	if !strings.Contains(hist, "interrupted") || strings.Count(hist, "driver.seed") < 2 {
		t.Errorf("the journal of a restore cut short:\n%s", hist)
	}
	mustCorral(t, home, "sandbox", "delete", "--all")
	mustCorral(t, home, "snapshot", "delete", "s1")
	if objs := fakeObjects(t, home); len(objs) != 0 {
		t.Fatalf("driver objects left: %v", objs)
	}
	if left, _ := os.ReadDir(filepath.Join(stateDir(home), "workdirs")); len(left) != 0 {
		t.Errorf("workdirs left: %d", len(left))
	}
}

// A sandbox whose /sandbox is its own disk (limits.disk) snapshots while it
// runs and while it is stopped, and a sandbox made from the snapshot gets
// a disk of its own with the files.
func TestSnapshotOfADisk(t *testing.T) {
	home := t.TempDir()
	nativeGateway(t, home)
	policy := filepath.Join(t.TempDir(), "disk.yaml")
	if err := os.WriteFile(policy, []byte("version: 1\nlimits: {disk: 16Mi}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCorral(t, home, "sandbox", "create", "--name", "disk", "--policy", policy, "--", "sleep", "1d")
	mustCorral(t, home, "sandbox", "exec", "disk", "--", "sh", "-c", "echo on-disk > /sandbox/f")
	mustCorral(t, home, "sandbox", "snapshot", "disk", "running")
	mustCorral(t, home, "sandbox", "stop", "disk")
	mustCorral(t, home, "sandbox", "snapshot", "disk", "stopped")
	mustCorral(t, home, "sandbox", "start", "disk")
	for _, snap := range []string{"running", "stopped"} {
		name := "from-" + snap
		mustCorral(t, home, "sandbox", "create", "--name", name, "--from-snapshot", snap)
		if out := mustCorral(t, home, "sandbox", "exec", name, "--", "sh", "-c", "cat /sandbox/f; df -k /sandbox | tail -1"); !strings.HasPrefix(out, "on-disk\n/dev/loop") {
			t.Errorf("%s: %q; want the file, on a disk of its own", name, out)
		}
	}
	mustCorral(t, home, "sandbox", "delete", "--all")
}

// A tenant's quota bounds what its snapshots hold: one past it is refused
// saying so, and leaves no snapshot; `tenant get` shows the use.
func TestSnapshotQuota(t *testing.T) {
	home := t.TempDir()
	startGateway(t, home)
	id := strings.TrimSpace(mustCorral(t, home, "sandbox", "create", "--name", "box", "--", "sleep", "1d"))
	wd := filepath.Join(stateDir(home), "workdirs", id)
	if err := os.MkdirAll(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wd, "data"), make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCorral(t, home, "tenant", "update", "default", "--max-snapshot-size", "1Mi")
	_, errOut, code := corral(t, home, "sandbox", "snapshot", "box", "big")
	if code == 0 || !strings.Contains(errOut, "tenant default's quota of 1Mi of snapshots is used up") {
		t.Fatalf("a snapshot past the quota: %d %q", code, errOut)
	}
	if out := mustCorral(t, home, "snapshot", "list"); strings.Contains(out, "big") {
		t.Fatalf("a refused snapshot is listed:\n%s", out)
	}
	mustCorral(t, home, "tenant", "update", "default", "--max-snapshot-size", "10Mi")
	mustCorral(t, home, "sandbox", "snapshot", "box", "big")
	if out := mustCorral(t, home, "tenant", "get"); !regexp.MustCompile(`snapshots\s+2Mi\s+10Mi`).MatchString(out) {
		t.Errorf("tenant get:\n%s", out)
	}
}
