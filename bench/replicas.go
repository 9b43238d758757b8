package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/tlsauth"
)

// replicasCreate runs two replicas of one PostgreSQL store on one home
// (fake driver) and times n creates to ready through each at once: one
// sent to the leader's socket, one to the standby's TLS address, which
// forwards it to the leader.
func replicasCreate(bin, home, store string, n int) (viaLeader, viaStandby []time.Duration, err error) {
	leader, err := startGateway(bin, home, "--driver", "fake", "--store", store)
	if err != nil {
		return nil, nil, err
	}
	defer leader.close()
	certs := filepath.Join(home, "bench-certs")
	if out, err := exec.Command(bin, "--home", home, "gateway", "client-cert", "bench", "--role", "admin", "--out", certs).CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("client-cert: %v: %s", err, out)
	}
	standby, err := startStandby(bin, home, store, certs)
	if err != nil {
		return nil, nil, err
	}
	defer standby.close()
	spec := &corralv1.SandboxSpec{Command: []string{"sleep", "1d"}}
	for i := range n {
		var wg sync.WaitGroup
		var a, b time.Duration
		var errA, errB error
		wg.Add(2)
		go func() { defer wg.Done(); a, errA = leader.create(fmt.Sprintf("l-%d", i), spec) }()
		go func() { defer wg.Done(); b, errB = standby.create(fmt.Sprintf("s-%d", i), spec) }()
		wg.Wait()
		if errA != nil || errB != nil {
			return nil, nil, fmt.Errorf("create %d: through the leader %v, through the standby %v", i, errA, errB)
		}
		viaLeader, viaStandby = append(viaLeader, a), append(viaStandby, b)
	}
	return viaLeader, viaStandby, nil
}

// startStandby starts a second replica on home and store, serving on a
// TLS address of its own, and returns a client of that address.
func startStandby(bin, home, store, certs string) (*gateway, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := lis.Addr().String()
	lis.Close()
	g := &gateway{cmd: exec.Command(bin, append([]string{"--home", home, "gateway", "--sandbox-label", "corral.bench", "--log-level", "warn",
		"--driver", "fake", "--store", store, "--listen", addr}, gatewayArgs...)...)}
	g.cmd.Stderr = os.Stderr
	if err := g.cmd.Start(); err != nil {
		return nil, err
	}
	cfg, err := tlsauth.ClientConfig(filepath.Join(certs, "ca.crt"), filepath.Join(certs, "bench.crt"), filepath.Join(certs, "bench.key"))
	if err == nil {
		g.conn, err = grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	}
	if err != nil {
		g.close()
		return nil, err
	}
	g.api = corralv1.NewSandboxServiceClient(g.conn)
	for range 300 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := g.api.ListSandboxes(ctx, &corralv1.ListSandboxesRequest{})
		cancel()
		if err == nil {
			return g, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	g.close()
	return nil, fmt.Errorf("the standby did not answer")
}
