package console

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/coder/websocket"
	"google.golang.org/grpc/status"

	"github.com/corral-sandbox/corral/client"
)

// terminalFrame is a text frame of the terminal's WebSocket: the browser
// sends resizes; the console sends the exit code, or why there is none.
type terminalFrame struct {
	Resize *client.TerminalSize `json:"resize,omitempty"`
	Exit   *int                 `json:"exit,omitempty"`
	Error  string               `json:"error,omitempty"`
}

// terminal runs a command with a TTY in a sandbox over a WebSocket: binary
// frames are its input one way and its output the other. The handshake
// must come from this console's own origin (websocket.Accept checks the
// Origin against the Host) and carry the session's CSRF token.
func (c *Console) terminal(w http.ResponseWriter, r *http.Request) {
	s, err := c.session(r)
	if err != nil {
		writeError(w, http.StatusUnauthorized, err.Error())
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.URL.Query().Get("csrf")), []byte(s.csrf)) != 1 {
		writeError(w, http.StatusForbidden, "a terminal needs the session's CSRF token")
		return
	}
	ws, err := websocket.Accept(w, r, nil) // refuses another origin with 403
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ctx, cancel := context.WithCancel(s.in(r.Context()))
	defer cancel()

	command := strings.Fields(r.URL.Query().Get("command"))
	if len(command) == 0 {
		command = []string{"/bin/sh"}
	}
	size := client.TerminalSize{Rows: dimension(r, "rows", 24), Cols: dimension(r, "cols", 80)}
	stdin, feed := io.Pipe()
	resize := make(chan client.TerminalSize, 4)
	go func() { // the browser's frames
		defer feed.Close()
		for {
			kind, data, err := ws.Read(ctx)
			if err != nil {
				cancel()
				return
			}
			if kind == websocket.MessageBinary {
				if _, err := feed.Write(data); err != nil {
					return
				}
				continue
			}
			var f terminalFrame
			if json.Unmarshal(data, &f) == nil && f.Resize != nil {
				select {
				case resize <- *f.Resize:
				default:
				}
			}
		}
	}()
	code, err := s.client.Exec(ctx, r.PathValue("name"), command, client.ExecOptions{TTY: true, Size: size, Resize: resize,
		Stdin: stdin, Stdout: wsWriter{ctx, ws}})
	end := terminalFrame{Exit: &code}
	if err != nil {
		end = terminalFrame{Error: status.Convert(err).Message()}
	}
	if b, err := json.Marshal(end); err == nil && ctx.Err() == nil {
		_ = ws.Write(ctx, websocket.MessageText, b)
	}
	ws.Close(websocket.StatusNormalClosure, "")
}

// wsWriter writes output as binary frames.
type wsWriter struct {
	ctx context.Context
	ws  *websocket.Conn
}

func (w wsWriter) Write(p []byte) (int, error) {
	if err := w.ws.Write(w.ctx, websocket.MessageBinary, p); err != nil {
		return 0, errors.Join(io.ErrClosedPipe, err)
	}
	return len(p), nil
}

// dimension is a terminal's rows or columns from the query, within 1..1000.
func dimension(r *http.Request, key string, def uint32) uint32 {
	n, err := strconv.ParseUint(r.URL.Query().Get(key), 10, 32)
	if err != nil || n < 1 || n > 1000 {
		return def
	}
	return uint32(n)
}
