package images

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// removeTemps removes entries of dir/tmp reserved by newTempLocked.
func (s *Store) removeTemps(paths []string) error {
	var errs []error
	for _, p := range paths {
		errs = append(errs, os.RemoveAll(p))
		s.mu.Lock()
		delete(s.temps, p)
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

// cleanTmp removes every entry of dir/tmp that no call in flight uses.
// Entries are reserved under s.mu as they are made, so one listed here and
// not reserved is a leftover.
func (s *Store) cleanTmp() error {
	entries, err := os.ReadDir(s.tmpDir())
	if err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	for _, e := range entries {
		p := filepath.Join(s.tmpDir(), e.Name())
		s.mu.Lock()
		busy := s.temps[p]
		s.mu.Unlock()
		if busy {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("image cache: clean %s: %w", p, err)
		}
	}
	return nil
}

// tempPath reserves a new file (or directory) in dir/tmp for a call in
// flight; release removes it and frees the name.
func (s *Store) tempPath(prefix string, dir bool) (path string, release func(), err error) {
	s.mu.Lock()
	path, err = s.newTempLocked(prefix, dir)
	s.mu.Unlock()
	if err != nil {
		return "", nil, err
	}
	return path, func() { s.removeTemps([]string{path}) }, nil
}

func (s *Store) newTempLocked(prefix string, dir bool) (string, error) {
	var path string
	if dir {
		p, err := os.MkdirTemp(s.tmpDir(), prefix+"-")
		if err != nil {
			return "", fmt.Errorf("image cache: %w", err)
		}
		path = p
	} else {
		f, err := os.CreateTemp(s.tmpDir(), prefix+"-")
		if err != nil {
			return "", fmt.Errorf("image cache: %w", err)
		}
		path = f.Name()
		f.Close()
	}
	s.temps[path] = true
	return path, nil
}
