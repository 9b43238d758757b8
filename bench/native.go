package main

import (
	"bufio"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// nativeCommand prints a line once it runs, then waits. A peer is ready
// when the line arrives; corral when its record says ready (the
// supervisor has seen the command's exec succeed, a little earlier).
var nativeCommand = []string{"sh", "-c", "echo ready; exec sleep 1000"}

// nativePeers run nativeCommand in new namespaces, as the native driver
// does (mount, PID, UTS, IPC, network), or bare.
var nativePeers = []struct {
	name string
	argv []string
}{
	{"bwrap", []string{"bwrap", "--unshare-all", "--die-with-parent", "--new-session",
		"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--"}},
	{"unshare", []string{"unshare", "--mount", "--pid", "--fork", "--uts", "--ipc", "--net", "--mount-proc", "--"}},
	{"fork+exec", nil},
}

// benchNative times the native driver against bwrap, unshare and a bare
// fork+exec of the same command.
func benchNative(bin, home string, n, warmup int) (*table, error) {
	var peers []string
	for _, p := range nativePeers {
		if p.argv != nil {
			if _, err := exec.LookPath(p.argv[0]); err != nil {
				return nil, fmt.Errorf("%s is not installed (Debian package %s): %w", p.argv[0], map[string]string{"bwrap": "bubblewrap", "unshare": "util-linux"}[p.name], err)
			}
		}
		peers = append(peers, p.name)
	}
	g, err := startGateway(bin, home, "--driver", "native")
	if err != nil {
		return nil, err
	}
	defer g.close()

	t := newTable("corral native driver vs bwrap, unshare and fork+exec (the same command)", cycleOps, peers)
	for i := range n + warmup {
		cd, err := g.cycle(fmt.Sprintf("bench-%d", i), nativeCommand)
		if err != nil {
			return nil, fmt.Errorf("corral run %d: %w", i, err)
		}
		peerTimes := make([]time.Duration, len(nativePeers))
		for j, p := range nativePeers {
			if peerTimes[j], err = peerReady(append(p.argv[:len(p.argv):len(p.argv)], nativeCommand...)); err != nil {
				return nil, fmt.Errorf("%s run %d: %w", p.name, i, err)
			}
		}
		if i < warmup {
			continue
		}
		for j, op := range cycleOps {
			t.add(op, "corral", cd[j])
		}
		for j, p := range nativePeers {
			t.add(cycleOps[0], p.name, peerTimes[j])
		}
	}
	return t, nil
}

// peerReady runs argv until the command prints its line, then kills it.
func peerReady(argv []string) (time.Duration, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	d := time.Since(t0)
	if err != nil || strings.TrimSpace(line) != "ready" {
		return 0, fmt.Errorf("%s printed %q: %v", argv[0], line, err)
	}
	return d, nil
}
