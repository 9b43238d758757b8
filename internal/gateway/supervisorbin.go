package gateway

import (
	"context"
	"debug/elf"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/buildid"
)

// helperName is the supervisor alone (cmd/corral-supervise), looked for
// beside the corral binary.
const helperName = "corral-supervise"

// supervisorBinary is the binary that runs inside sandboxes (the
// supervisor and exec stage): corral-supervise when it lies beside the
// running corral and is the same build, because it starts in about half
// of corral's time (none of the gateway's libraries to initialise), else
// corral itself. It is chosen once per process, and said once in the log.
var supervisorBinary = sync.OnceValues(func() (choice, error) {
	exe, err := os.Executable()
	if err != nil {
		return choice{}, fmt.Errorf("find the corral binary: %w", err)
	}
	if err := requireStatic(exe); err != nil {
		return choice{}, err
	}
	helper := filepath.Join(filepath.Dir(exe), helperName)
	if why := sameBuild(helper, buildid.Identity()); why != "" {
		return choice{path: exe, why: why}, nil
	}
	return choice{path: helper}, nil
})

// choice is the supervisor binary, and why it is corral itself if it is.
type choice struct {
	path string
	why  string
}

var logSupervisor sync.Once

// sameBuild says why helper is not to be used by a gateway of build id,
// or "" if it is that build.
func sameBuild(helper, id string) string {
	if _, err := os.Stat(helper); err != nil {
		return "no " + helperName + " beside the corral binary (build both: CGO_ENABLED=0 go build -o DIR/ ./cmd/corral ./cmd/corral-supervise)"
	}
	if id == "" { // nothing the helper says can match: do not start it
		return "this corral is a build of a modified or unversioned tree, which names no build to check " + helperName + " against (build both at once with " + buildid.StampFlag("$(date +%s%N)") + ")"
	}
	if err := requireStatic(helper); err != nil {
		return err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, helper, "supervise", "identity").Output()
	if err != nil {
		return fmt.Sprintf("%s supervise identity: %v", helper, err)
	}
	if got := strings.TrimSpace(string(out)); got != id {
		return fmt.Sprintf("%s is another build (%s) than the corral binary (%s): rebuild both", helper, got, id)
	}
	return ""
}

// installSupervisor copies the supervisor binary into dir, so that
// containers mount a file that outlives this process (go run deletes its
// binary), and returns the copy's path.
func installSupervisor(dir string, log *slog.Logger) (string, error) {
	c, err := supervisorBinary()
	if err != nil {
		return "", err
	}
	logSupervisor.Do(func() {
		if c.why != "" {
			log.Info("sandboxes run corral's own supervisor, which starts slower than "+helperName, "why", c.why)
		} else {
			log.Info("sandboxes run "+helperName, "path", c.path)
		}
	})
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	src, err := os.Open(c.path)
	if err != nil {
		return "", fmt.Errorf("read the supervisor binary: %w", err)
	}
	defer src.Close()
	dst := filepath.Join(dir, "corral")
	tmp, err := os.CreateTemp(dir, ".corral-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	// rename keeps the file that running containers mount intact
	return dst, os.Rename(tmp.Name(), dst)
}

// requireStatic refuses a corral binary that needs a dynamic loader: it
// runs inside every sandbox as the supervisor and exec stage, where the
// root is an image without the host's libraries (a build with cgo, as
// plain `go build` makes where a C compiler is installed).
func requireStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("read the corral binary %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("the corral binary %s is dynamically linked (built with cgo), but it runs inside sandboxes, whose images lack its libraries: "+
				"build it static, CGO_ENABLED=0 go build ./cmd/corral (or CGO_ENABLED=0 go run ./cmd/corral gateway)", path)
		}
	}
	return nil
}
