package supervisor

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxReportSize caps what ReadReport reads of a report file: a supervisor
// writes a pid, a line of protections or one error message.
const MaxReportSize = 4 << 10

// ReadReport reads the file name (one path element) of dir, a directory a
// sandbox may be able to write to (a supervisor's reports: ready,
// protections, failed). It never follows a symlink, never blocks on a FIFO
// or a device, refuses anything but a regular file, and reads at most
// MaxReportSize bytes, refusing a larger file. A missing file is an error
// that wraps os.ErrNotExist.
func ReadReport(dir, name string) ([]byte, error) {
	path := filepath.Join(dir, name)
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("report %q: not a file name", name)
	}
	dirFD, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	fd, err := unix.Openat(dirFD, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	unix.Close(dirFD)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err} // ELOOP for a symlink
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("report %s: not a regular file (mode %#o)", path, st.Mode&unix.S_IFMT)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxReportSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxReportSize {
		return nil, fmt.Errorf("report %s: larger than %d bytes", path, MaxReportSize)
	}
	return data, nil
}

// The reports a supervisor writes for the gateway, in its report directory
// (Docker) or its bundle (native).
const (
	// ProtectionsFile says what of the policy protects the main process
	// ("landlock ABI 7; no_new_privs; seccomp default").
	ProtectionsFile = "protections"
	// FailedFile says why the main process could not run (Docker mode).
	FailedFile = "failed"
)
