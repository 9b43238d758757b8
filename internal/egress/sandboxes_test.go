package egress

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/corral-sandbox/corral/internal/driver"
)

// A sandbox renamed (a claimed pool member) has its decisions under the
// new name once Refresh has read its record again.
func TestRefreshTakesTheNewName(t *testing.T) {
	name := "pool-1a2b3c4d"
	var past []Decision
	s := &Sandboxes{Dir: t.TempDir(), Lookup: func(context.Context, string) (Network, error) {
		return Network{Name: name}, nil
	}, OnDenied: func(d Decision) { past = append(past, d) }}
	b, err := s.box(context.Background(), "id1")
	if err != nil {
		t.Fatal(err)
	}
	s.record("id1", b, Decision{Host: "a.test", Verdict: Denied})
	name = "job1"
	s.Refresh("id1")
	s.record("id1", b, Decision{Host: "b.test", Verdict: Denied})
	if len(past) != 2 || past[0].Sandbox != "pool-1a2b3c4d" || past[1].Sandbox != "job1" {
		t.Fatalf("decisions: %+v; want the member's name, then the claimed one", past)
	}
}

// A gateway killed after it wrote a sandbox's CA and before its bundle
// left a trust directory without the bundle that every start mounts: the
// next Prepare writes it, with the same CA.
func TestPrepareMendsAMissingBundle(t *testing.T) {
	host := filepath.Join(t.TempDir(), "host.pem")
	if err := os.WriteFile(host, []byte("HOST CAS"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Sandboxes{Dir: t.TempDir(), HostBundle: host}
	trust, err := s.Prepare("id1")
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(trust, driver.BundleFile)
	if err := os.Remove(bundle); err != nil {
		t.Fatal(err)
	}
	if trust, err = s.Prepare("id1"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatalf("after Prepare the bundle is still missing: %v", err)
	}
	ca, err := os.ReadFile(filepath.Join(trust, driver.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(got, []byte("HOST CAS\n")) || !bytes.HasSuffix(got, ca) {
		t.Errorf("bundle %q; want the host's CAs, then the sandbox's CA", got)
	}
}

// A bundle that cannot be written is Prepare's error, not a trust
// directory returned without it.
func TestPrepareSaysWhenTheBundleCannotBeMended(t *testing.T) {
	s := &Sandboxes{Dir: t.TempDir()}
	trust, err := s.Prepare("id1")
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(trust, driver.BundleFile)
	if err := os.Remove(bundle); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(bundle, 0o755); err != nil { // no file is renamed over a directory
		t.Fatal(err)
	}
	if _, err := s.Prepare("id1"); err == nil {
		t.Fatal("Prepare succeeded although the missing bundle could not be written")
	}
}

// The CA's files are written without an fsync: what a crash of the
// machine leaves of them (an empty key, a certificate cut short, a bundle
// cut short) the next Prepare mends, with a new CA when the old one does
// not load, and the same one when only the bundle is broken.
func TestPrepareMendsWhatACrashLeft(t *testing.T) {
	for _, tc := range []struct {
		file  string // relative to the sandbox's directory
		keep  int    // bytes kept
		newCA bool
	}{
		{"key.pem", 0, true},
		{"trust/" + driver.CAFile, 100, true},
		{"trust/" + driver.BundleFile, 0, false},
		{"trust/" + driver.BundleFile, 300, false},
	} {
		s := &Sandboxes{Dir: t.TempDir()}
		trust, err := s.Prepare("id1")
		if err != nil {
			t.Fatal(err)
		}
		before, err := os.ReadFile(filepath.Join(trust, driver.CAFile))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(filepath.Join(s.Dir, "id1", tc.file), int64(tc.keep)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Prepare("id1"); err != nil {
			t.Fatalf("%s cut to %d bytes: Prepare: %v", tc.file, tc.keep, err)
		}
		after, _ := os.ReadFile(filepath.Join(trust, driver.CAFile))
		key, _ := os.ReadFile(filepath.Join(s.Dir, "id1", "key.pem"))
		if _, err := LoadCA(after, key); err != nil {
			t.Fatalf("%s cut to %d bytes: after Prepare the CA does not load: %v", tc.file, tc.keep, err)
		}
		bundle, _ := os.ReadFile(filepath.Join(trust, driver.BundleFile))
		if !bytes.HasSuffix(bundle, after) || len(after) == 0 {
			t.Errorf("%s cut to %d bytes: the bundle does not end with the CA", tc.file, tc.keep)
		}
		if renewed := !bytes.Equal(before, after); renewed != tc.newCA {
			t.Errorf("%s cut to %d bytes: a new CA %v; want %v", tc.file, tc.keep, renewed, tc.newCA)
		}
	}
}
