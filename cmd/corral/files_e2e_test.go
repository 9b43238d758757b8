package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// filesGateway is a gateway of one real driver for the file tests, and how
// to find a sandbox's /sandbox on the host.
type filesGateway struct {
	driver  string
	home    string
	workdir func(t *testing.T, name string) string
}

// onBothDrivers runs f on a Docker gateway and on a native one.
func onBothDrivers(t *testing.T, f func(t *testing.T, g filesGateway)) {
	t.Run("docker", func(t *testing.T) {
		testenv.RequireDocker(t)
		home, label := t.TempDir(), newLabel(t)
		dockerGateway(t, home, label)
		f(t, filesGateway{driver: "docker", home: home, workdir: func(t *testing.T, name string) string {
			return dockerWorkdir(t, getJSON(t, home, name)["id"].(string))
		}})
	})
	t.Run("native", func(t *testing.T) {
		home := t.TempDir()
		nativeGateway(t, home)
		f(t, filesGateway{driver: "native", home: home, workdir: func(t *testing.T, name string) string {
			return filepath.Join(home, "native", "sandboxes", getJSON(t, home, name)["id"].(string), "workdir")
		}})
	})
}

// dockerWorkdir is the host directory of a Docker sandbox's /sandbox
// volume.
func dockerWorkdir(t *testing.T, id string) string {
	t.Helper()
	api := engine(t)
	vols, err := api.VolumeList(context.Background(), client.VolumeListOptions{Filters: client.Filters{}.Add("label", "corral.sandbox.id="+id)})
	if err != nil || len(vols.Items) != 1 {
		t.Fatalf("the volume of sandbox %s: %v, %v", id, vols, err)
	}
	return vols.Items[0].Mountpoint
}

// corralIn runs the CLI on the gateway of home with stdin.
func corralIn(t *testing.T, home string, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	return corralRun(t, nil, stdin, append([]string{"--home", home}, args...)...)
}

func filesAPI(t *testing.T, home string) corralv1.FileServiceClient {
	t.Helper()
	return corralv1.NewFileServiceClient(apiConn(t, home))
}

// fileRecord is what a copy must keep of a file.
type fileRecord struct {
	mode  fs.FileMode
	mtime int64 // microseconds
	sum   string
	link  string
}

// makeTree writes a big random file and n small files in nested
// directories, with modes, times and a symlink, under dir.
func makeTree(t *testing.T, dir string, big int64, n int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(f, rand.Reader, big); err != nil {
		t.Fatal(err)
	}
	f.Close()
	past := time.Unix(1600000000, 123456000)
	for i := range n {
		sub := filepath.Join(dir, "small", fmt.Sprintf("d%02d", i%17), fmt.Sprintf("e%d", i%3))
		if err := os.MkdirAll(sub, 0o750); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(sub, fmt.Sprintf("f%05d", i))
		mode := fs.FileMode(0o644)
		if i%5 == 0 {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(fmt.Sprintf("file %d %x\n", i, i*i)), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		os.Chtimes(p, past, past.Add(time.Duration(i)*time.Second))
	}
	if err := os.Symlink("small/d00/e0/f00000", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/nowhere/at/all", filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
}

// treeRecords describes every entry under dir, by relative name.
func treeRecords(t *testing.T, dir string) map[string]fileRecord {
	t.Helper()
	out := map[string]fileRecord{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		r := fileRecord{mode: fi.Mode()}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			r.link, _ = os.Readlink(p)
		case fi.Mode().IsRegular():
			r.mtime = fi.ModTime().UnixMicro()
			data, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			io.Copy(h, data)
			data.Close()
			r.sum = hex.EncodeToString(h.Sum(nil))
		}
		out[rel] = r
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, what string, want, got map[string]fileRecord) {
	t.Helper()
	if len(want) != len(got) {
		t.Errorf("%s: %d entries, want %d", what, len(got), len(want))
	}
	bad := 0
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			if bad++; bad <= 5 {
				t.Errorf("%s: %s is %+v, want %+v", what, name, g, w)
			}
		}
	}
}

// A big file and a tree of many small files go in and come out with the
// same bytes, modes, times and symlinks; tar streams go both ways too.
func TestFilesCopyRoundTrip(t *testing.T) {
	onBothDrivers(t, func(t *testing.T, g filesGateway) {
		src := filepath.Join(t.TempDir(), "src")
		makeTree(t, src, 48<<20, 600)
		want := treeRecords(t, src)
		mustCorral(t, g.home, "sandbox", "create", "--name", "box", "--", "sleep", "1000")
		mustCorral(t, g.home, "sandbox", "cp", src, "box:/sandbox/in")
		sum := mustCorral(t, g.home, "sandbox", "exec", "box", "--", "sha256sum", "/sandbox/in/big")
		if !strings.HasPrefix(sum, want["big"].sum) {
			t.Errorf("inside, sha256sum of the big file: %q, want %s", sum, want["big"].sum)
		}
		// the files belong to the sandbox's user
		if owner := mustCorral(t, g.home, "sandbox", "exec", "box", "--", "stat", "-c", "%u", "/sandbox/in/small/d01/e1/f00001"); owner != "1000\n" {
			t.Errorf("a copied file belongs to uid %q inside, want 1000", owner)
		}
		out := filepath.Join(t.TempDir(), "out")
		mustCorral(t, g.home, "sandbox", "cp", "box:/sandbox/in", out)
		sameTree(t, "copied in and out", want, treeRecords(t, out))

		// into an existing directory, and DIR/. for what it holds
		existing := t.TempDir()
		mustCorral(t, g.home, "sandbox", "cp", "box:/sandbox/in/small", existing)
		if _, err := os.Stat(filepath.Join(existing, "small", "d16", "e1", "f00016")); err != nil {
			t.Errorf("copy into an existing directory: %v", err)
		}
		mustCorral(t, g.home, "sandbox", "cp", "box:/sandbox/in/small/.", existing)
		if _, err := os.Stat(filepath.Join(existing, "d16", "e1", "f00016")); err != nil {
			t.Errorf("copy of DIR/.: %v", err)
		}

		// a tar stream on stdout, and one on stdin
		tarOut, errOut, code := corralIn(t, g.home, nil, "sandbox", "cp", "box:/sandbox/in/big", "-")
		if code != 0 {
			t.Fatalf("cp to -: %d %s", code, errOut)
		}
		tr := tar.NewReader(strings.NewReader(tarOut))
		hdr, err := tr.Next()
		if err != nil || hdr.Name != "big" {
			t.Fatalf("cp to -: first entry %v, %v", hdr, err)
		}
		h := sha256.New()
		io.Copy(h, tr)
		if got := hex.EncodeToString(h.Sum(nil)); got != want["big"].sum {
			t.Errorf("cp to -: the big file's sum %s, want %s", got, want["big"].sum)
		}
		mustCorral(t, g.home, "sandbox", "exec", "box", "--", "mkdir", "/sandbox/fromtar")
		if _, errOut, code := corralIn(t, g.home, strings.NewReader(tarOut), "sandbox", "cp", "-", "box:/sandbox/fromtar"); code != 0 {
			t.Fatalf("cp from -: %d %s", code, errOut)
		}
		if sum := mustCorral(t, g.home, "sandbox", "exec", "box", "--", "sha256sum", "/sandbox/fromtar/big"); !strings.HasPrefix(sum, want["big"].sum) {
			t.Errorf("cp from -: %q", sum)
		}
	})
}

// hostileTar is a tar stream of entries as given.
func hostileTar(t *testing.T, entries ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = 1
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("x"))
		}
	}
	tw.Close()
	return buf.Bytes()
}

// Hostile tar streams are refused with the reason, in a running sandbox
// and in a stopped one (copied from the host then), and nothing is written
// outside the destination: checked from the host.
func TestFilesHostileTarRefused(t *testing.T) {
	deep := strings.Repeat("d/", 10000) + "escaped"
	cases := []struct {
		name    string
		entries []*tar.Header
		want    string
	}{
		{"dotdot", []*tar.Header{{Name: "../escaped", Typeflag: tar.TypeReg}}, `".." component`},
		{"absolute", []*tar.Header{{Name: "/tmp/escaped", Typeflag: tar.TypeReg}}, "an absolute name"},
		{"symlink out", []*tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../.."}, {Name: "l/escaped", Typeflag: tar.TypeReg}}, "leads outside"},
		{"absolute symlink", []*tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, {Name: "l/escaped", Typeflag: tar.TypeReg}}, "leads outside"},
		{"device", []*tar.Header{{Name: "escaped", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}, "device node"},
		{"deep", []*tar.Header{{Name: deep, Typeflag: tar.TypeReg}}, "over the limit"},
	}
	onBothDrivers(t, func(t *testing.T, g filesGateway) {
		mustCorral(t, g.home, "sandbox", "create", "--name", "box", "--", "sleep", "1000")
		workdir := g.workdir(t, "box")
		for _, running := range []bool{true, false} {
			if !running {
				mustCorral(t, g.home, "sandbox", "stop", "box")
			}
			for _, c := range cases {
				dst := fmt.Sprintf("/sandbox/dst-%s-%v", strings.ReplaceAll(c.name, " ", "-"), running)
				if _, err := filesAPI(t, g.home).MakeDir(context.Background(), &corralv1.MakeDirRequest{Sandbox: "box", Path: dst}); err != nil {
					t.Fatal(err)
				}
				_, errOut, code := corralIn(t, g.home, bytes.NewReader(hostileTar(t, c.entries...)), "sandbox", "cp", "-", "box:"+dst)
				if code == 0 || !strings.Contains(errOut, c.want) {
					t.Errorf("running %v, %s: exit %d, %q; want a refusal saying %q", running, c.name, code, errOut, c.want)
				}
				for _, p := range []string{filepath.Join(workdir, "escaped"), filepath.Join(filepath.Dir(workdir), "escaped"),
					filepath.Join(workdir, strings.TrimPrefix(dst, "/sandbox/"), "escaped"), "/escaped", "/tmp/escaped"} {
					if _, err := os.Lstat(p); err == nil {
						t.Errorf("running %v, %s: %s was written", running, c.name, p)
						os.Remove(p)
					}
				}
			}
		}
		mustCorral(t, g.home, "sandbox", "start", "box")
		if out, _, code := corral(t, g.home, "sandbox", "exec", "box", "--", "ls", "/tmp/escaped", "/escaped", "/sandbox/escaped"); code == 0 {
			t.Errorf("inside the sandbox, escaped files exist: %q", out)
		}
	})
}

// A watch reports created, modified and removed, in order, within 200 ms
// of the change.
func TestFilesWatchEvents(t *testing.T) {
	onBothDrivers(t, func(t *testing.T, g filesGateway) {
		mustCorral(t, g.home, "sandbox", "create", "--name", "box", "--", "sleep", "1000")
		mustCorral(t, g.home, "sandbox", "exec", "box", "--", "mkdir", "/sandbox/w")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		stream, err := filesAPI(t, g.home).WatchDir(ctx, &corralv1.WatchDirRequest{Sandbox: "box", Path: "/sandbox/w"})
		if err != nil {
			t.Fatal(err)
		}
		type arrival struct {
			ev *corralv1.FileEvent
			at time.Time
		}
		events := make(chan arrival, 100)
		go func() {
			defer close(events)
			for {
				ev, err := stream.Recv()
				if err != nil {
					return
				}
				events <- arrival{ev, time.Now()}
			}
		}()
		if first := <-events; first.ev.GetType() != "ready" {
			t.Fatalf("the first event is %v, want ready", first.ev)
		}
		mustCorral(t, g.home, "sandbox", "exec", "box", "--", "sh", "-c", "echo 1 > /sandbox/w/a; sleep 0.3; echo 2 >> /sandbox/w/a; sleep 0.3; rm /sandbox/w/a")
		done := time.Now()
		var got []string
		var first, last time.Time
		timeout := time.After(5 * time.Second)
	collect:
		for len(got) < 3 {
			select {
			case a, ok := <-events:
				if !ok {
					break collect
				}
				s := a.ev.GetType() + " " + a.ev.GetPath()
				if len(got) == 0 || got[len(got)-1] != s { // runs of writes may be several "modified"
					got = append(got, s)
				}
				if first.IsZero() {
					first = a.at
				}
				last = a.at
			case <-timeout:
				break collect
			}
		}
		want := []string{"created /sandbox/w/a", "modified /sandbox/w/a", "removed /sandbox/w/a"}
		if strings.Join(got, "; ") != strings.Join(want, "; ") {
			t.Fatalf("events %q, want %q", got, want)
		}
		// The changes were 0.3 s apart: the events came as they happened,
		// not in one batch at the end.
		if spread := last.Sub(first); spread < 400*time.Millisecond {
			t.Errorf("the events came %v apart, the changes 600ms: not as they happened", spread)
		}
		if lag := last.Sub(done); lag > 200*time.Millisecond {
			t.Errorf("the last event came %v after the change was made, want within 200ms", lag)
		}
		t.Logf("the last event came %v after the command that made it returned", last.Sub(done))
		cancel()
	})
}

// A path the policy makes read-only cannot be written through the API,
// running or stopped; what it makes writable can.
func TestFilesReadOnlyPolicyRefused(t *testing.T) {
	onBothDrivers(t, func(t *testing.T, g filesGateway) {
		pol := filepath.Join(t.TempDir(), "ro.yaml")
		os.WriteFile(pol, []byte("version: 1\nfilesystem_policy:\n  include_workdir: false\n  read_only: [/bin, /sbin, /usr, /lib, /lib64, /etc, /sandbox]\n  read_write: [/tmp, /dev/null]\nlandlock: {compatibility: hard_requirement}\n"), 0o600)
		local := filepath.Join(t.TempDir(), "f")
		os.WriteFile(local, []byte("data\n"), 0o644)
		mustCorral(t, g.home, "sandbox", "create", "--name", "box", "--policy", pol, "--", "sleep", "1000")
		workdir := g.workdir(t, "box")
		mustCorral(t, g.home, "sandbox", "cp", local, "box:/tmp/")
		if out := mustCorral(t, g.home, "sandbox", "exec", "box", "--", "cat", "/tmp/f"); out != "data\n" {
			t.Errorf("a copy to read-write /tmp: %q", out)
		}
		_, errOut, code := corral(t, g.home, "sandbox", "cp", local, "box:/sandbox/")
		if code == 0 || !strings.Contains(errOut, "ermission denied") {
			t.Errorf("a copy to read-only /sandbox: exit %d %q; want permission denied", code, errOut)
		}
		_, err := filesAPI(t, g.home).MakeDir(context.Background(), &corralv1.MakeDirRequest{Sandbox: "box", Path: "/sandbox/d"})
		if err == nil || !strings.Contains(err.Error(), "PermissionDenied") {
			t.Errorf("mkdir in read-only /sandbox: %v", err)
		}
		mustCorral(t, g.home, "sandbox", "stop", "box")
		_, errOut, code = corral(t, g.home, "sandbox", "cp", local, "box:/sandbox/")
		if code == 0 || !strings.Contains(errOut, "read-only") {
			t.Errorf("stopped, a copy to read-only /sandbox: exit %d %q; want read-only", code, errOut)
		}
		if entries, _ := os.ReadDir(workdir); len(entries) != 0 {
			t.Errorf("the read-only /sandbox holds %v", entries)
		}
	})
}

// A stopped sandbox's /sandbox is copied in and out from the host; the
// next incarnation sees what went in, owned by its user.
func TestFilesStoppedSandboxCopy(t *testing.T) {
	onBothDrivers(t, func(t *testing.T, g filesGateway) {
		mustCorral(t, g.home, "sandbox", "create", "--name", "box", "--", "sleep", "1000")
		mustCorral(t, g.home, "sandbox", "exec", "box", "--", "sh", "-c", "echo kept > /sandbox/file")
		mustCorral(t, g.home, "sandbox", "stop", "box")
		out := filepath.Join(t.TempDir(), "out")
		mustCorral(t, g.home, "sandbox", "cp", "box:/sandbox/file", out)
		if data, _ := os.ReadFile(out); string(data) != "kept\n" {
			t.Errorf("copied out of a stopped sandbox: %q", data)
		}
		src := filepath.Join(t.TempDir(), "tree")
		makeTree(t, src, 1<<20, 20)
		mustCorral(t, g.home, "sandbox", "cp", src, "box:/sandbox/")
		list, err := filesAPI(t, g.home).ListDir(context.Background(), &corralv1.ListDirRequest{Sandbox: "box", Path: "/sandbox"})
		if err != nil || len(list.Entries) != 2 || list.Entries[1].Name != "tree" || list.Entries[1].Type != "dir" {
			t.Errorf("list of a stopped sandbox's /sandbox: %v, %v", list, err)
		}
		_, errOut, code := corral(t, g.home, "sandbox", "cp", "box:/etc/passwd", out)
		if code == 0 || !strings.Contains(errOut, "not running, so only /sandbox") {
			t.Errorf("cp of /etc from a stopped sandbox: %d %q", code, errOut)
		}
		mustCorral(t, g.home, "sandbox", "start", "box")
		if sum := mustCorral(t, g.home, "sandbox", "exec", "box", "--", "sha256sum", "/sandbox/tree/big"); !strings.HasPrefix(sum, treeRecords(t, src)["big"].sum) {
			t.Errorf("the next incarnation sees %q", sum)
		}
		if owner := mustCorral(t, g.home, "sandbox", "exec", "box", "--", "stat", "-c", "%u", "/sandbox/tree/big"); owner != "1000\n" {
			t.Errorf("a file copied while stopped belongs to uid %q inside, want 1000", owner)
		}
		mustCorral(t, g.home, "sandbox", "exec", "box", "--", "sh", "-c", "echo more >> /sandbox/tree/big")
	})
}

// Errors name what is wrong.
func TestFilesErrors(t *testing.T) {
	onBothDrivers(t, func(t *testing.T, g filesGateway) {
		local := filepath.Join(t.TempDir(), "f")
		os.WriteFile(local, []byte("data\n"), 0o644)
		mustCorral(t, g.home, "sandbox", "create", "--name", "box", "--", "sleep", "1000")
		mustCorral(t, g.home, "sandbox", "exec", "box", "--", "sh", "-c", "echo x > /sandbox/file")
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"nope:/sandbox/x", local}, `sandbox "nope" not found`},
			{[]string{"box:/sandbox/missing", local + "2"}, "/sandbox/missing: no such file or directory"},
			{[]string{local, "box:/sandbox/file/x"}, "/sandbox/file: not a directory"},
			{[]string{local, "box:/sandbox/nodir/x"}, "/sandbox/nodir: no such directory"},
			{[]string{"box:/sandbox/file", "box:/sandbox/x"}, "exactly one side"},
		} {
			_, errOut, code := corral(t, g.home, append([]string{"sandbox", "cp"}, c.args...)...)
			if code == 0 || !strings.Contains(errOut, c.want) {
				t.Errorf("cp %v: exit %d %q; want %q", c.args, code, errOut, c.want)
			}
		}
		mustCorral(t, g.home, "sandbox", "stop", "box")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stream, err := filesAPI(t, g.home).WatchDir(ctx, &corralv1.WatchDirRequest{Sandbox: "box", Path: "/sandbox"})
		if err == nil {
			_, err = stream.Recv()
		}
		if err == nil || !strings.Contains(err.Error(), "not running: watch needs a running sandbox") {
			t.Errorf("watch of a stopped sandbox: %v", err)
		}
	})
}

// A copy past limits.disk fails with ENOSPC, clearly, and the sandbox
// keeps running.
func TestFilesCopyPastDiskQuota(t *testing.T) {
	onBothDrivers(t, func(t *testing.T, g filesGateway) {
		testenv.RequireRoot(t)
		pol := filepath.Join(t.TempDir(), "disk.yaml")
		os.WriteFile(pol, []byte("version: 1\nlimits: {disk: 16Mi}\n"), 0o600)
		big := filepath.Join(t.TempDir(), "big")
		f, _ := os.Create(big)
		io.CopyN(f, rand.Reader, 32<<20)
		f.Close()
		mustCorral(t, g.home, "sandbox", "create", "--name", "box", "--policy", pol, "--", "sleep", "1000")
		_, errOut, code := corral(t, g.home, "sandbox", "cp", big, "box:/sandbox/")
		if code == 0 || !strings.Contains(errOut, "ENOSPC") || !strings.Contains(errOut, "limits.disk") {
			t.Errorf("cp of 32 MiB into a 16 MiB /sandbox: exit %d %q; want ENOSPC", code, errOut)
		}
		if v := getJSON(t, g.home, "box"); v["phase"] != "ready" {
			t.Errorf("after the full disk: %v", v["phase"])
		}
		mustCorral(t, g.home, "sandbox", "exec", "box", "--", "true")
		// Stopped: Docker's disk stays mounted on the host, a native one is
		// mounted only inside the running sandbox.
		mustCorral(t, g.home, "sandbox", "stop", "box")
		small := filepath.Join(t.TempDir(), "small")
		os.WriteFile(small, []byte("x\n"), 0o644)
		_, errOut, code = corral(t, g.home, "sandbox", "cp", small, "box:/sandbox/")
		switch {
		case g.driver == "docker" && code != 0:
			t.Errorf("stopped, cp onto the disk: %d %q", code, errOut)
		case g.driver == "native" && (code == 0 || !strings.Contains(errOut, "mounted only while it runs")):
			t.Errorf("stopped, cp onto a native disk: %d %q; want a refusal that says to start it", code, errOut)
		}
		mustCorral(t, g.home, "sandbox", "delete", "box") // its disk is unmounted
	})
}
