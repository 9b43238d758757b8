package main

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
	"github.com/corral-sandbox/corral/internal/testbug"
	"github.com/corral-sandbox/corral/internal/testenv"
)

const testbugPkg = "github.com/corral-sandbox/corral/internal/testbug"

// A gateway built without the test tag has none
// of the test switches — the testbug package is not among its
// dependencies, none of corral's code in it names an environment variable
// with TEST in it, and its strings hold no CORRAL_TEST. The tagged build
// that the other tests run has them, so the check can fail.
func TestReleaseBinaryHasNoTestSwitches(t *testing.T) {
	for _, cmd := range []string{"./cmd/corral", "./cmd/corral-supervise"} {
		if deps := goList(t, cmd); slices.Contains(deps, testbugPkg) {
			t.Errorf("go list -deps %s includes %s", cmd, testbugPkg)
		}
	}
	if deps := goList(t, "-tags", testbug.Tag, "./cmd/corral"); !slices.Contains(deps, testbugPkg) {
		t.Errorf("go list -tags %s -deps ./cmd/corral lacks %s: the check above proves nothing", testbug.Tag, testbugPkg)
	}

	for _, lit := range corralStringsWith(t, "TEST") {
		t.Errorf("the release build's code has a string with TEST in it: %s", lit)
	}

	release, err := testenv.BuildCorralRelease(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{release, testenv.SupervisorOf(release)} {
		rel, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(rel, []byte("CORRAL_TEST")); i >= 0 {
			t.Errorf("the release binary %s holds %q", filepath.Base(path), rel[i:min(len(rel), i+40)])
		}
	}
	tagged, err := os.ReadFile(bin) // TestMain's, built with the tag
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{testbug.ReintroduceEnv, testbug.LandlockABIEnv} {
		if !bytes.Contains(tagged, []byte(name)) {
			t.Errorf("the test build lacks %s: the check above proves nothing", name)
		}
	}
}

// The fake driver of a release build runs every call as asked: its fault
// injection (package faults, and the rules file it reads) is not linked.
// The tagged build that the other tests run has it, so the check can fail.
func TestReleaseBinaryHasNoFakeFaults(t *testing.T) {
	const faultsPkg = "github.com/corral-sandbox/corral/internal/driver/fake/faults"
	if deps := goList(t, "./cmd/corral"); slices.Contains(deps, faultsPkg) {
		t.Errorf("go list -deps ./cmd/corral includes %s", faultsPkg)
	}
	if deps := goList(t, "-tags", testbug.Tag, "./cmd/corral"); !slices.Contains(deps, faultsPkg) {
		t.Errorf("go list -tags %s -deps ./cmd/corral lacks %s: the check above proves nothing", testbug.Tag, faultsPkg)
	}
	release, err := testenv.BuildCorralRelease(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rel, err := os.ReadFile(release)
	if err != nil {
		t.Fatal(err)
	}
	tagged, err := os.ReadFile(bin) // TestMain's, built with the tag
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(tagged, []byte(faults.FaultsFile)) {
		t.Fatalf("the test build lacks %q: the check below proves nothing", faults.FaultsFile)
	}
	if bytes.Contains(rel, []byte(faults.FaultsFile)) {
		t.Errorf("the release binary holds %q, the fake driver's fault rules", faults.FaultsFile)
	}
}

// Every program start inside a sandbox (its PID 1, each exec stage) pays
// the package initialisation of corral-supervise, so it links no gRPC or
// protobuf (their init took ~3 ms of each start); the gateway does, so the
// check can fail.
func TestSupervisorLinksNoRPC(t *testing.T) {
	rpc := func(pkg string) bool {
		return strings.HasPrefix(pkg, "google.golang.org/grpc") || strings.HasPrefix(pkg, "google.golang.org/protobuf")
	}
	for _, pkg := range goList(t, "./cmd/corral-supervise") {
		if rpc(pkg) {
			t.Errorf("corral-supervise links %s", pkg)
		}
	}
	if !slices.ContainsFunc(goList(t, "./cmd/corral"), rpc) {
		t.Error("corral links no gRPC: the check above proves nothing")
	}
}

// goList returns the import paths of the dependencies of a package (and
// the package), as go list -deps gives them for the flags.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps"}, args...)...)
	cmd.Dir = testenv.ModuleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Fields(string(out))
}

// corralStringsWith returns the string literals that contain sub in the
// files of corral's own packages that a build without the test tag
// compiles into the binary.
func corralStringsWith(t *testing.T, sub string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Dir,GoFiles,Module", "./cmd/corral")
	cmd.Dir = testenv.ModuleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var found []string
	files := 0
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			Dir     string
			GoFiles []string
			Module  *struct{ Path string }
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || p.Module.Path != "github.com/corral-sandbox/corral" {
			continue
		}
		for _, name := range p.GoFiles {
			path := filepath.Join(p.Dir, name)
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files++
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && strings.Contains(lit.Value, sub) {
					found = append(found, fset.Position(lit.Pos()).String()+": "+lit.Value)
				}
				return true
			})
		}
	}
	if files < 50 {
		t.Fatalf("only %d of corral's files found in the release build: go list changed?", files)
	}
	return found
}
