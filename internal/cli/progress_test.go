package cli

import (
	"bytes"
	"strings"
	"testing"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
)

var pullSteps = []*corralv1.PullImageProgress{
	{Status: "Pulling from library/busybox"},
	{Layer: "sha256:0123456789abcdef0123", Status: "downloading", Current: 10, Total: 2000},
	{Layer: "sha256:0123456789abcdef0123", Status: "downloading", Current: 1000, Total: 2000},
	{Layer: "sha256:fedcba9876543210", Status: "cached"},
	{Layer: "sha256:0123456789abcdef0123", Status: "downloading", Current: 2000, Total: 2000},
	{Layer: "sha256:0123456789abcdef0123", Status: "done\x1b[2J"},
}

// Off a terminal: one line per status change of a layer, not per byte, and
// nothing of what the gateway sent can drive the terminal.
func TestPullProgressLines(t *testing.T) {
	var out bytes.Buffer
	p := newPullProgress(&out)
	for _, msg := range pullSteps {
		p.show(msg)
	}
	want := "Pulling from library/busybox\n" +
		"0123456789ab: downloading (2kB)\n" +
		"fedcba987654: cached\n" +
		"0123456789ab: done [2J\n"
	if out.String() != want {
		t.Fatalf("lines:\n%s\nwant:\n%s", out.String(), want)
	}
}

// On a terminal: every step redraws the rows in place, one per layer, with
// a bar.
func TestPullProgressBars(t *testing.T) {
	var out bytes.Buffer
	p := &pullProgress{w: &out, tty: true, rows: map[string]*corralv1.PullImageProgress{}}
	for _, msg := range pullSteps[:3] {
		p.show(msg)
	}
	frames := strings.Split(out.String(), "\x1b[")
	if got := strings.Count(out.String(), "\x1b[1A"); got != 1 {
		t.Errorf("the second step moves up one row %d times, want once: %q", got, out.String())
	}
	if got := strings.Count(out.String(), "\x1b[2A"); got != 1 {
		t.Errorf("the third step moves up two rows %d times, want once: %q", got, out.String())
	}
	last := out.String()[strings.LastIndex(out.String(), "\x1b[2A"):]
	bar := "0123456789ab: downloading [" + strings.Repeat("=", 15) + strings.Repeat(" ", 15) + "] 1kB/2kB"
	if !strings.Contains(last, "Pulling from library/busybox\n") || !strings.Contains(last, bar+"\n") {
		t.Errorf("the last redraw = %q, want the image's row and %q", last, bar)
	}
	if len(frames) < 3 {
		t.Errorf("output = %q", out.String())
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 999: "999B", 1000: "1kB", 1984162: "1.98MB", 5 << 30: "5.37GB"} {
		if got := humanSize(n); got != want {
			t.Errorf("humanSize(%d) = %q, want %q", n, got, want)
		}
	}
}
