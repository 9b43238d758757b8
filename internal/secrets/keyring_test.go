package secrets

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.key")
	k, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	value := []byte("ghp_0123456789abcdefTOKEN")
	sealed, err := k.Seal("gh-token", value)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, value) || bytes.Contains(sealed, []byte(base64.StdEncoding.EncodeToString(value))) {
		t.Fatal("the sealed form holds the value")
	}
	if again, _ := k.Seal("gh-token", value); bytes.Equal(again, sealed) {
		t.Error("two seals of one value are equal: the nonce is not random")
	}
	if got, err := k.Open("gh-token", sealed); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Open: %q, %v", got, err)
	}
	// the key is kept: a keyring loaded again opens what the first sealed
	k2, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := k2.Open("gh-token", sealed); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Open with the key loaded again: %q, %v", got, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %04o, want 0600", fi.Mode().Perm())
	}
}

// What was sealed for one name, changed, or sealed by another gateway does
// not open, and the error does not hold the value.
func TestOpenRefuses(t *testing.T) {
	k, err := Load(filepath.Join(t.TempDir(), "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	value := []byte("s3cr3t-value")
	sealed, _ := k.Seal("a", value)
	other, err := Load(filepath.Join(t.TempDir(), "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	for what, open := range map[string]func() ([]byte, error){
		"another name":     func() ([]byte, error) { return k.Open("b", sealed) },
		"a changed byte":   func() ([]byte, error) { return k.Open("a", tampered) },
		"another key":      func() ([]byte, error) { return other.Open("a", sealed) },
		"a cut-short seal": func() ([]byte, error) { return k.Open("a", sealed[:5]) },
	} {
		got, err := open()
		if err == nil || got != nil || strings.Contains(err.Error(), string(value)) {
			t.Errorf("Open of %s: %q, %v; want an error without the value", what, got, err)
		}
	}
}

func TestFingerprint(t *testing.T) {
	k, _ := Load(filepath.Join(t.TempDir(), "secrets.key"))
	a, b := k.Fingerprint([]byte("one")), k.Fingerprint([]byte("two"))
	if a == b || a != k.Fingerprint([]byte("one")) || !strings.HasPrefix(a, "fp:") || len(a) != len("fp:")+16 {
		t.Errorf("fingerprints %q, %q", a, b)
	}
	other, _ := Load(filepath.Join(t.TempDir(), "secrets.key"))
	if other.Fingerprint([]byte("one")) == a {
		t.Error("two gateways give one value the same fingerprint: it is no keyed hash")
	}
}

func TestKeyFileRefused(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open.key")
	os.WriteFile(open, make([]byte, keySize), 0o644)
	if _, err := Load(open); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a key file others may read: %v", err)
	}
	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, make([]byte, 7), 0o600)
	if _, err := Load(short); err == nil || !strings.Contains(err.Error(), "7 bytes") {
		t.Errorf("a key file of 7 bytes: %v", err)
	}
}

// A placeholder is stable for one incarnation and credential, and differs
// for another incarnation, credential, part, sandbox or gateway.
func TestPlaceholder(t *testing.T) {
	k, _ := Load(filepath.Join(t.TempDir(), "secrets.key"))
	p := k.Placeholder("sb1", 1, "github", "")
	if p != k.Placeholder("sb1", 1, "github", "") || !strings.HasPrefix(p, PlaceholderPrefix) || len(p) != len(PlaceholderPrefix)+32 {
		t.Fatalf("placeholder %q", p)
	}
	other, _ := Load(filepath.Join(t.TempDir(), "secrets.key"))
	for _, q := range []string{k.Placeholder("sb1", 2, "github", ""), k.Placeholder("sb1", 1, "gitlab", ""),
		k.Placeholder("sb1", 1, "github", "access_key_id"), k.Placeholder("sb2", 1, "github", ""), other.Placeholder("sb1", 1, "github", "")} {
		if q == p {
			t.Errorf("placeholder %q given twice", q)
		}
	}
	if strings.Trim(p[len(PlaceholderPrefix):], "abcdefghijklmnopqrstuvwxyz234567") != "" {
		t.Errorf("placeholder %q has characters a header, URL or user name may not take", p)
	}
}
