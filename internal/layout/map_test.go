package layout

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/corral-sandbox/corral/"

// rule is one row of the map: who may import a package.
type rule struct {
	anyone, nobody bool
	importers      []string // module-relative paths
}

// readMap parses the table under "## Where things are" in docs/design.md.
func readMap(t *testing.T, root string) map[string]rule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "## Where things are\n")
	if !ok {
		t.Fatal(`docs/design.md has no "## Where things are" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	names := regexp.MustCompile("`([a-z0-9/._-]+)`")
	rules := map[string]rule{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 5 || strings.Contains(cells[1], "---") || strings.TrimSpace(cells[1]) == "package" {
			continue
		}
		var r rule
		who := strings.TrimSpace(cells[3])
		switch {
		case who == "anyone":
			r.anyone = true
		case who == "—" || who == "tests only":
			r.nobody = true
		default:
			for _, m := range names.FindAllStringSubmatch(who, -1) {
				r.importers = append(r.importers, m[1])
			}
		}
		for _, m := range names.FindAllStringSubmatch(cells[1], -1) {
			rules[m[1]] = r
		}
	}
	if len(rules) < 10 {
		t.Fatalf("read only %d packages from the map: is the table still there?", len(rules))
	}
	return rules
}

// Every package of the module is in the map, and imports (tests aside)
// only what the map allows it to.
func TestDesignMap(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	rules := readMap(t, root)
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		if pkg == "internal/layout" {
			continue
		}
		if _, ok := rules[pkg]; !ok {
			t.Errorf("package %s is not in docs/design.md's map: add what it owns and who may import it", pkg)
		}
		for _, imp := range fields[1:] {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			checked++
			r, known := rules[dep]
			switch {
			case !known, r.anyone:
			case r.nobody || !slices.Contains(r.importers, pkg):
				t.Errorf("%s imports %s, which the map lets only %v import", pkg, dep, r.importers)
			}
		}
	}
	if checked < 30 {
		t.Errorf("checked only %d imports: is go list's output still what this test reads?", checked)
	}
}

// The API core (the lifecycle, and the front ends' edge) reaches compute
// only through the driver interface: no package that needs the
// compute's host (network namespaces, the egress proxy, a supervisor's
// control socket), no concrete driver or store, not even through another
// package. A Kubernetes driver runs where none of those can.
func TestCoreIsLocationNeutral(t *testing.T) {
	forbidden := []string{
		"internal/netns", "internal/egress", "internal/control", "internal/supervisor",
		"internal/driver/docker", "internal/driver/native", "internal/driver/fake", "internal/store/sqlite",
		"internal/images", "internal/cgroups", "internal/diskimage",
	}
	for _, pkg := range []string{"internal/lifecycle", "internal/service"} {
		cmd := exec.Command("go", "list", "-deps", "./"+pkg)
		cmd.Dir = filepath.Join("..", "..")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, module+"internal/driver") {
			t.Fatalf("go list -deps %s does not list internal/driver: is its output still what this test reads?", pkg)
		}
		for _, dep := range deps {
			rel, ok := strings.CutPrefix(dep, module)
			if !ok {
				continue
			}
			for _, f := range forbidden {
				if rel == f || strings.HasPrefix(rel, f+"/") {
					t.Errorf("%s depends on %s: the core must reach compute through the driver interface alone", pkg, rel)
				}
			}
		}
	}
}

// The command line reaches a gateway only through the public client
// package: it makes no gRPC connection of its own (codes and status, to
// read the gateway's answers, are all it takes of gRPC).
func TestCommandLineIsAClientOfTheClientPackage(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, "./internal/cli")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := strings.Fields(string(out))
	if !slices.Contains(imports, module+"client") {
		t.Errorf("internal/cli does not import the client package: %v", imports)
	}
	for _, imp := range imports {
		if strings.HasPrefix(imp, "google.golang.org/grpc") && imp != "google.golang.org/grpc/codes" && imp != "google.golang.org/grpc/status" {
			t.Errorf("internal/cli imports %s: a connection to a gateway is the client package's to make", imp)
		}
	}
}

// The gRPC edge only translates: of corral it imports the API, the core's
// packages for their types and calls, the caller it derives from the
// transport, the access decision it asks for each call (the rules are
// access's), and the tunnel of a forwarded port. A package of rules or of
// compute here would be a rule a second front end (MCP, a console) would
// have to repeat.
func TestServiceIsTranslationOnly(t *testing.T) {
	allowed := []string{
		"api/corralv1", "internal/access", "internal/caller", "internal/driver", "internal/errdefs", "internal/exposed",
		"internal/files", "internal/lifecycle", "internal/sandbox", "internal/secrets", "internal/tunnel",
	}
	cmd := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, "./internal/service")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := 0
	for _, imp := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(imp, module)
		if !ok {
			continue
		}
		seen++
		if !slices.Contains(allowed, rel) {
			t.Errorf("internal/service imports %s: the edge translates; rules and compute belong to the core", rel)
		}
	}
	if seen < 5 {
		t.Errorf("internal/service imports %d of corral's packages: is go list's output still what this test reads?", seen)
	}
}
