package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/corral-sandbox/corral/internal/capped"
	"github.com/corral-sandbox/corral/internal/control"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

// DialPort implements driver.PortDialer over pods/exec: the supervisor
// in the Pod's main container connects to 127.0.0.1:port there (`supervise
// connect`) and the exec's stdin and stdout are the connection. I chose it
// over pods/portforward, whose failure to connect arrives on its error
// stream only after the connection is handed out, so that a refused port
// is an error of the dial, as on the other drivers.
func (d *Driver) DialPort(ctx context.Context, ref driver.Ref, port int) (net.Conn, error) {
	p, err := d.runningGeneration(ctx, ref)
	if err != nil {
		return nil, err
	}
	req := d.api.CoreV1().RESTClient().Post().Resource("pods").Namespace(d.opts.Namespace).Name(p.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: mainContainer,
			Command:   supervisor.ConnectArgv(supervisorPath, port),
			Stdin:     true, Stdout: true, Stderr: true,
		}, scheme.ParameterCodec)
	exec, err := d.executor(req.URL())
	if err != nil {
		return nil, err
	}
	in, stdin := net.Pipe()                                       // what the caller writes, the exec's stdin
	stdout, out := net.Pipe()                                     // the exec's stdout, what the caller reads
	streamCtx, cancel := context.WithCancel(context.Background()) // the connection outlives ctx
	first := &firstByte{w: stdout, seen: make(chan struct{})}
	stderr := capped.New(4096)
	ended := make(chan error, 1)
	go func() {
		err := exec.StreamWithContext(streamCtx, remotecommand.StreamOptions{Stdin: stdin, Stdout: first, Stderr: stderr})
		stdout.Close()
		stdin.Close()
		ended <- err
	}()
	conn := &portConn{in: in, out: out, cancel: cancel}
	select {
	case <-first.seen:
		return conn, nil
	case err := <-ended:
		cancel()
		var exit utilexec.CodeExitError
		if errors.As(err, &exit) && exit.Code == supervisor.ConnectRefused {
			return nil, fmt.Errorf("port %d of sandbox %s: %w", port, ref.ID, syscall.ECONNREFUSED)
		}
		return nil, fmt.Errorf("port %d of sandbox %s in pod %s: %v: %s", port, ref.ID, p.Name, d.wrap(err, "exec"), control.Printable(strings.TrimSpace(stderr.String())))
	case <-ctx.Done():
		conn.Close()
		return nil, ctx.Err()
	}
}

// runningGeneration is the running Pod of incarnation ref;
// errdefs.ErrNotFound when none runs.
func (d *Driver) runningGeneration(ctx context.Context, ref driver.Ref) (*corev1.Pod, error) {
	pods, err := d.pods(ctx, ref.ID)
	if err != nil {
		return nil, err
	}
	for i := range pods {
		p := &pods[i]
		if st := mainStatus(p); generation(p.Labels) == ref.Generation && st != nil && st.State.Running != nil && p.DeletionTimestamp == nil {
			return p, nil
		}
	}
	return nil, errdefs.NotFound("sandbox %s does not run generation %d", ref.ID, ref.Generation)
}

// firstByte passes what is written to w but the first byte
// (supervisor.Connected), and closes seen when that arrives.
type firstByte struct {
	w    net.Conn
	seen chan struct{}
	once sync.Once
	got  bool
}

func (f *firstByte) Write(p []byte) (int, error) {
	n := len(p)
	if !f.got && len(p) > 0 {
		if p[0] != supervisor.Connected {
			return 0, fmt.Errorf("supervise connect wrote %q before it was connected", p[0])
		}
		f.got, p = true, p[1:]
		f.once.Do(func() { close(f.seen) })
	}
	if _, err := f.w.Write(p); err != nil {
		return 0, err
	}
	return n, nil
}

// portConn is the caller's end of a port's connection, as a TCP
// connection is one: each direction has its own pipe, so that CloseWrite
// ends the exec's stdin (and the supervisor half-closes the connection
// in the Pod) while reading goes on; Close ends the exec too.
type portConn struct {
	in     net.Conn // written to
	out    net.Conn // read from
	cancel context.CancelFunc
}

func (c *portConn) Read(p []byte) (int, error)         { return c.out.Read(p) }
func (c *portConn) Write(p []byte) (int, error)        { return c.in.Write(p) }
func (c *portConn) CloseWrite() error                  { return c.in.Close() }
func (c *portConn) LocalAddr() net.Addr                { return c.in.LocalAddr() }
func (c *portConn) RemoteAddr() net.Addr               { return c.out.RemoteAddr() }
func (c *portConn) SetReadDeadline(t time.Time) error  { return c.out.SetReadDeadline(t) }
func (c *portConn) SetWriteDeadline(t time.Time) error { return c.in.SetWriteDeadline(t) }

func (c *portConn) SetDeadline(t time.Time) error {
	return errors.Join(c.SetReadDeadline(t), c.SetWriteDeadline(t))
}

func (c *portConn) Close() error {
	c.cancel()
	return errors.Join(c.in.Close(), c.out.Close())
}
