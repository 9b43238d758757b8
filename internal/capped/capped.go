// Package capped is a buffer that keeps the first bytes written to it
// and notes whether it cut any: what bounds the output of a sandbox's
// process that the gateway holds whole (an exec's stderr, a tool's
// answer).
package capped

import "bytes"

// Buffer keeps the first Max bytes written to it; every write succeeds
// whole, and Cut says whether any byte was dropped.
type Buffer struct {
	bytes.Buffer
	Max int
	Cut bool
}

// New is a buffer that keeps max bytes.
func New(max int) *Buffer { return &Buffer{Max: max} }

func (b *Buffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := b.Max - b.Len(); n > room {
		b.Cut = true
		p = p[:max(room, 0)]
	}
	b.Buffer.Write(p)
	return n, nil
}
