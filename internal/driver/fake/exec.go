package fake

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

var (
	_ driver.Execer    = (*Driver)(nil)
	_ driver.LogReader = (*Driver)(nil)
)

// run is how the fake "runs" a command in the sandbox whose /sandbox is
// workdir: it knows echo (its arguments), cat (its input, or a file of
// /sandbox), true, false and exit N; anything else is not found (127), as
// a shell says it. It returns what the command prints on its standard
// output, or on its standard error for a missing command, and its exit
// code.
func run(command []string, stdin io.Reader, workdir string) (string, int) {
	switch command[0] {
	case "echo":
		return strings.Join(command[1:], " ") + "\n", 0
	case "cat":
		if len(command) == 2 {
			rel, ok := strings.CutPrefix(command[1], "/sandbox/")
			root, err := os.OpenRoot(workdir)
			if !ok || err != nil {
				return "", 1
			}
			defer root.Close()
			data, err := root.ReadFile(rel)
			if err != nil {
				return "", 1
			}
			return string(data), 0
		}
		if stdin == nil {
			return "", 0
		}
		var b bytes.Buffer
		_, _ = io.Copy(&b, stdin)
		return b.String(), 0
	case "true":
		return "", 0
	case "false":
		return "", 1
	case "exit":
		code := 0
		if len(command) > 1 {
			code, _ = strconv.Atoi(command[1])
		}
		return "", code
	}
	return "", 127
}

// Exec implements driver.Execer with run, in a running object.
func (d *Driver) Exec(ctx context.Context, id string, opts driver.ExecOptions) (int, error) {
	if opts.Stdout == nil {
		opts.Stdout = io.Discard
	}
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	code := 0
	err := d.call(ctx, "exec", id, "", func() error {
		o, err := d.object(id)
		if err != nil {
			return err
		}
		if o.State != driver.StateRunning {
			return errdefs.FailedPrecondition("fake object for sandbox %s is %s, not running", id, o.State)
		}
		if len(opts.Command) == 0 {
			return errdefs.InvalidArgument("exec needs a command")
		}
		var out string
		out, code = run(opts.Command, opts.Stdin, d.workdir(id))
		if code == 127 {
			_, err = fmt.Fprintf(opts.Stderr, "fake: %s: not found\n", opts.Command[0])
			return err
		}
		_, err = io.WriteString(opts.Stdout, out)
		return err
	})
	return code, err
}

// logPoll is how often a followed fake log is looked at.
const logPoll = 20 * time.Millisecond

// Logs implements driver.LogReader with what the main commands printed.
func (d *Driver) Logs(ctx context.Context, id string, opts driver.LogOptions, stdout, _ io.Writer) error {
	o, err := d.object(id)
	if err != nil {
		return err
	}
	lines := strings.SplitAfter(o.Output, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if opts.Tail > 0 && len(lines) > opts.Tail {
		lines = lines[len(lines)-opts.Tail:]
	}
	if _, err := io.WriteString(stdout, strings.Join(lines, "")); err != nil {
		return err
	}
	sent := len(o.Output)
	for opts.Follow && o.State == driver.StateRunning {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(logPoll):
		}
		if o, err = d.object(id); err != nil {
			return nil // deleted meanwhile: the log ends
		}
		if len(o.Output) > sent {
			if _, err := io.WriteString(stdout, o.Output[sent:]); err != nil {
				return err
			}
			sent = len(o.Output)
		}
	}
	return nil
}

// object returns this gateway's object of id.
func (d *Driver) object(id string) (object, error) {
	o, err := d.read(id)
	if err != nil {
		return object{}, err
	}
	if !d.mine(o) {
		return object{}, errdefs.NotFound("fake object for sandbox %s not found", id)
	}
	return *o, nil
}
