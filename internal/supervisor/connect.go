package supervisor

import (
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
)

// Connected is the byte Connect writes first once it is connected; before
// it, the caller knows nothing of the connection yet.
const Connected = 0

// ConnectRefused is Connect's exit code when nothing listens on the port
// (ECONNREFUSED's number).
const ConnectRefused = int(syscall.ECONNREFUSED)

// Connect connects to 127.0.0.1:port, writes Connected to out, then
// passes what in holds to the connection and what the connection sends
// to out, until the connection's end (in's end closes the connection's
// writing half). ErrConnectRefused when nothing listens there.
func Connect(port int, in io.Reader, out io.Writer) error {
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return ErrConnectRefused
		}
		return err
	}
	defer c.Close()
	if _, err := out.Write([]byte{Connected}); err != nil {
		return err
	}
	go func() {
		io.Copy(c, in)
		c.(*net.TCPConn).CloseWrite()
	}()
	_, err = io.Copy(out, c)
	return err
}

// ErrConnectRefused is Connect's error when nothing listens on the port.
var ErrConnectRefused = errors.New("connection refused")
