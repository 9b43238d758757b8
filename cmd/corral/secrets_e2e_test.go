package main

import (
	"bytes"
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Secrets through the CLI: created from stdin, a file or the environment,
// never from an argument; described by fingerprint, never by value;
// updated and deleted; and the value is nowhere in the gateway's home but
// sealed.
func TestSecretsThroughTheCLI(t *testing.T) {
	home := t.TempDir()
	g := startGateway(t, home)
	value := "ghp_corral0123456789SECRETvalue"

	out, errOut, code := corralRun(t, []string{"CORRAL_HOME=" + home}, strings.NewReader(value+"\n"), "secret", "create", "gh-token")
	if code != 0 || !strings.HasPrefix(out, "gh-token fp:") {
		t.Fatalf("secret create from stdin: %d %q %q", code, out, errOut)
	}
	fp := strings.Fields(out)[1]
	file := filepath.Join(t.TempDir(), "value")
	os.WriteFile(file, []byte(value), 0o600)
	if out := mustCorral(t, home, "secret", "create", "from-file", "--from-file", file); !strings.Contains(out, fp) {
		t.Errorf("the same value from a file: %q; want the same fingerprint %s", out, fp)
	}
	if out, _, code := corralRun(t, []string{"CORRAL_HOME=" + home, "MY_VALUE=" + value}, nil, "secret", "create", "from-env", "--from-env", "MY_VALUE"); code != 0 || !strings.Contains(out, fp) {
		t.Errorf("the same value from the environment: %d %q", code, out)
	}
	if _, errOut, code := corral(t, home, "secret", "create", "argv", value); code == 0 || !strings.Contains(errOut, "never an argument") {
		t.Errorf("a value given as an argument: %d %q; want it refused", code, errOut)
	}
	if _, errOut, code := corralRun(t, []string{"CORRAL_HOME=" + home}, strings.NewReader(""), "secret", "create", "empty"); code == 0 || !strings.Contains(errOut, "empty") {
		t.Errorf("an empty value: %d %q", code, errOut)
	}
	if _, errOut, code := corralRun(t, []string{"CORRAL_HOME=" + home}, strings.NewReader("x"), "secret", "create", "gh-token"); code == 0 || !strings.Contains(errOut, `secret "gh-token" already exists`) {
		t.Errorf("a taken name: %d %q", code, errOut)
	}
	if _, errOut, code := corralRun(t, []string{"CORRAL_HOME=" + home}, strings.NewReader(strings.Repeat("x", 70000)), "secret", "create", "big"); code == 0 || !strings.Contains(errOut, "more than 65536") {
		t.Errorf("a 70 KB value: %d %q", code, errOut)
	}

	for _, args := range [][]string{{"secret", "get", "gh-token"}, {"secret", "list"}, {"secret", "get", "gh-token", "-o", "json"}} {
		out := mustCorral(t, home, args...)
		if strings.Contains(out, value) || !strings.Contains(out, fp) {
			t.Errorf("%v: %q; want the fingerprint and never the value", args, out)
		}
	}
	out, _, code = corralRun(t, []string{"CORRAL_HOME=" + home}, strings.NewReader("rotated-value"), "secret", "update", "gh-token")
	if code != 0 || strings.Contains(out, fp) {
		t.Errorf("secret update: %d %q; want a new fingerprint", code, out)
	}
	mustCorral(t, home, "secret", "delete", "from-file", "from-env")
	if out := mustCorral(t, home, "secret", "list"); strings.Contains(out, "from-file") || !strings.Contains(out, "gh-token") {
		t.Errorf("secret list after deletes: %q", out)
	}
	if _, errOut, code := corral(t, home, "secret", "get", "from-file"); code == 0 || !strings.Contains(errOut, `secret "from-file" not found`) {
		t.Errorf("get of a deleted secret: %d %q", code, errOut)
	}

	// the home (store, its journal, the key, logs) holds neither value in
	// the clear nor in base64, and the gateway's log output neither
	g.signal(15)
	g.exitCode(30 * time.Second)
	for _, v := range []string{value, "rotated-value"} {
		for _, needle := range [][]byte{[]byte(v), []byte(base64.StdEncoding.EncodeToString([]byte(v)))} {
			filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
				if err != nil || !d.Type().IsRegular() {
					return nil
				}
				if data, _ := os.ReadFile(p); bytes.Contains(data, needle) {
					t.Errorf("%s holds a secret's value (%q)", p, needle)
				}
				return nil
			})
			if strings.Contains(g.logs.String(), string(needle)) {
				t.Errorf("the gateway's log holds a secret's value (%q)", needle)
			}
		}
	}
	if fi, err := os.Stat(filepath.Join(home, "secrets.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the secrets key: %v, %v; want it in the home, mode 0600", fi, err)
	}
}
