package supervisor

import (
	"bufio"
	"context"
	"fmt"
	"os"

	"github.com/corral-sandbox/corral/internal/files"
	"github.com/corral-sandbox/corral/internal/policy"
)

// runFiles runs a file operation (files.Command) in this process instead
// of a program: with the same protections as any command of the exec
// stage (capabilities, Landlock, no_new_privs, the user, seccomp), applied
// to every thread first, so the operation reads and writes only what the
// sandbox's user may under its policy. It exits; it returns only an error
// that came before the operation ran.
func runFiles(args []string, pol policy.Policy, hasPolicy, dropCaps bool, report *os.File) error {
	req, err := files.ParseArgv(args)
	if err != nil {
		return err
	}
	if err := applyStage(pol, hasPolicy, dropCaps, report); err != nil {
		return err
	}
	if report != nil {
		report.Close() // what an exec would close: the caller waits for its end
	}
	fsys, err := files.Local(req)
	if err == nil {
		out := bufio.NewWriterSize(os.Stdout, 256<<10)
		err = fsys.Do(context.Background(), req, bufio.NewReaderSize(os.Stdin, 256<<10), flusher{out})
		if ferr := out.Flush(); err == nil {
			err = ferr
		}
	}
	if err != nil {
		fmt.Fprint(os.Stderr, files.ErrLine(err))
		os.Exit(1)
	}
	os.Exit(0)
	return nil
}

// flusher flushes what is written at once when it is a line (a watch's
// event): the rest waits until the buffer fills.
type flusher struct{ w *bufio.Writer }

func (f flusher) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil && len(p) > 0 && p[len(p)-1] == '\n' {
		err = f.w.Flush()
	}
	return n, err
}
