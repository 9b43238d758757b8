package sqlite

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/corral-sandbox/corral/internal/store"
	"github.com/corral-sandbox/corral/internal/store/storetest"
)

// The shared store suite, on SQLite files of each test's own directory.
func TestStoreSuite(t *testing.T) {
	var (
		mu   sync.Mutex
		dirs = map[string]string{}
	)
	storetest.Run(t, func(t *testing.T, name string) store.Store {
		mu.Lock()
		dir, ok := dirs[t.Name()]
		if !ok {
			dir = t.TempDir()
			dirs[t.Name()] = dir
		}
		mu.Unlock()
		return openStore(t, filepath.Join(dir, name+".db"))
	})
}
