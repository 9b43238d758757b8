package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"

	"golang.org/x/term"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	corral "github.com/corral-sandbox/corral/client"
)

// pullProgress shows a pull's progress: on a terminal, one line per layer
// (and one for the image) redrawn in place, with a bar where sizes are
// known; elsewhere, a plain line whenever a layer's status changes, never
// one per byte.
type pullProgress struct {
	w     io.Writer
	tty   bool
	order []string // layers, as they first appeared ("" is the image)
	rows  map[string]*corralv1.PullImageProgress
	drawn int // lines on the terminal that the next redraw replaces
}

func newPullProgress(w io.Writer) *pullProgress {
	return &pullProgress{w: w, tty: isTerminal(w), rows: map[string]*corralv1.PullImageProgress{}}
}

// isTerminal tells whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// show takes one step of the pull.
func (p *pullProgress) show(msg *corralv1.PullImageProgress) {
	key := msg.Layer
	prev, seen := p.rows[key]
	if !seen {
		p.order = append(p.order, key)
	}
	p.rows[key] = msg
	if p.tty {
		p.redraw()
		return
	}
	if !seen || prev.Status != msg.Status {
		fmt.Fprintln(p.w, progressLine(msg, false))
	}
}

// redraw draws every row again, over the rows drawn before.
func (p *pullProgress) redraw() {
	var b strings.Builder
	if p.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", p.drawn)
	}
	for _, key := range p.order {
		b.WriteString("\r\x1b[K")
		b.WriteString(progressLine(p.rows[key], true))
		b.WriteByte('\n')
	}
	p.drawn = len(p.order)
	io.WriteString(p.w, b.String())
}

// barWidth is the width of a progress bar, brackets aside.
const barWidth = 30

// progressLine is one layer's (or the image's) step as a line, with a bar
// when bar is set and the total is known.
func progressLine(msg *corralv1.PullImageProgress, bar bool) string {
	line := printableText(msg.Status)
	if msg.Layer != "" {
		line = shortDigest(printableText(msg.Layer)) + ": " + line
	}
	switch {
	case msg.Total > 0 && bar:
		done := min(barWidth, int(float64(barWidth)*float64(msg.Current)/float64(msg.Total)))
		line += fmt.Sprintf(" [%s%s] %s/%s", strings.Repeat("=", done), strings.Repeat(" ", barWidth-done),
			humanSize(msg.Current), humanSize(msg.Total))
	case msg.Total > 0:
		line += " (" + humanSize(msg.Total) + ")"
	case msg.Current > 0 && bar:
		line += " " + humanSize(msg.Current)
	}
	return line
}

// shortDigest is a layer's digest cut to 12 hex digits, as docker shows it.
func shortDigest(d string) string {
	if _, hex, ok := strings.Cut(d, ":"); ok {
		d = hex
	}
	return d[:min(12, len(d))]
}

// printableText keeps what a terminal shows as text: what a gateway or an
// engine sends cannot move the cursor or change colours.
func printableText(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, strings.ToValidUTF8(s, "\uFFFD"))
}

// humanSize is a size as docker shows it: 3 significant digits, decimal
// units.
func humanSize(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	f := float64(n)
	for _, u := range []string{"kB", "MB", "GB", "TB", "PB"} {
		f /= unit
		if f < unit {
			return fmt.Sprintf("%.3g%s", f, u)
		}
	}
	return fmt.Sprintf("%.3gEB", f/unit)
}

// pullImage pulls image through the gateway, showing its progress on w,
// and returns the image (nil when if_needed found nothing to do).
func pullImage(ctx context.Context, c *corral.Client, image string, ifNeeded bool, w io.Writer) (*corralv1.Image, error) {
	stream, err := c.PullImage(ctx, &corralv1.PullImageRequest{Image: image, IfNeeded: ifNeeded})
	if err != nil {
		return nil, err
	}
	show := newPullProgress(w)
	var img *corralv1.Image
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return img, nil
		}
		if err != nil {
			return nil, err
		}
		if msg.Image != nil {
			img = msg.Image
			continue
		}
		show.show(msg)
	}
}
