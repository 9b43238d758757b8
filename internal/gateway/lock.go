package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// homeLock is an exclusive flock on HOME/gateway.lock, held for the whole
// life of a gateway; the kernel releases it however the process ends.
type homeLock struct{ f *os.File }

func lockHome(home string) (*homeLock, error) {
	path := filepath.Join(home, "gateway.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("home %s: %w", home, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another gateway (pid %s) is already running on home %s; stop it or use another --home",
				string(bytes.TrimSpace(pid)), home)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return &homeLock{f: f}, nil
}

func (l *homeLock) release() {
	_ = l.f.Truncate(0)
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
}
