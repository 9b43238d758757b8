package files

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// A watch reports what happens in its directory in order, after "ready",
// and ends when its input does.
func TestWatchReportsInOrder(t *testing.T) {
	fsys, dir, _ := sandboxFS(t)
	os.Mkdir(filepath.Join(dir, "w"), 0o755)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- fsys.Do(context.Background(), Request{Op: OpWatch, Path: "/sandbox/w"}, inR, outW)
		outW.Close()
	}()
	lines := bufio.NewScanner(outR)
	next := func() Event {
		t.Helper()
		for lines.Scan() {
			if len(lines.Bytes()) == 0 {
				continue // a heartbeat
			}
			var ev Event
			if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
				t.Fatal(err)
			}
			return ev
		}
		t.Fatalf("the watch ended: %v", lines.Err())
		return Event{}
	}
	if ev := next(); ev.Type != "ready" {
		t.Fatalf("first event %+v, want ready", ev)
	}
	f := filepath.Join(dir, "w", "a")
	os.WriteFile(f, []byte("1"), 0o644)
	if ev := next(); ev != (Event{Type: "created", Path: "/sandbox/w/a"}) {
		t.Errorf("after a create: %+v", ev)
	}
	if ev := next(); ev != (Event{Type: "modified", Path: "/sandbox/w/a"}) {
		t.Errorf("after a write: %+v", ev)
	}
	os.Remove(f)
	ev := next()
	for ev.Type == "modified" { // the close after the write, if it came apart
		ev = next()
	}
	if ev != (Event{Type: "removed", Path: "/sandbox/w/a"}) {
		t.Errorf("after a remove: %+v", ev)
	}
	os.Mkdir(filepath.Join(dir, "w", "sub"), 0o755)
	if ev := next(); ev != (Event{Type: "created", Path: "/sandbox/w/sub", Dir: true}) {
		t.Errorf("after a mkdir: %+v", ev)
	}
	inW.Close()
	go io.Copy(io.Discard, outR)
	if err := <-done; err != nil {
		t.Errorf("the watch ended with %v", err)
	}
}
