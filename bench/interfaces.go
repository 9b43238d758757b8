package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/testenv"
	"github.com/corral-sandbox/corral/internal/tlsauth"
)

const interfacesTitle = "interfaces: an echo exec round trip through each, beside a direct gRPC call in the same run"

// The interfaces an agent reaches a sandbox through, as rows: those the
// bench drives from its own process, then the SDKs of other languages,
// which time themselves (bench/sdk).
var (
	interfaceOps = []string{"Go client package", "Go client package, a token over TLS", "CLI (corral sandbox exec)", "MCP over stdio (corral mcp)",
		"MCP over HTTPS (/mcp)"}
	sdkOps = []string{"TypeScript SDK", "Python SDK"}
)

// benchInterfaces times `echo` run in one ready native sandbox through
// each interface, each run beside a direct ExecSandbox call on the
// gateway's socket; the goal is each within 1.5× + 2 ms of the direct call.
func benchInterfaces(bin, home string, n, warmup int) (*table, []*figure, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	g, err := startGateway(bin, home, "--driver", "native", "--listen", addr)
	if err != nil {
		return nil, nil, err
	}
	defer g.close()
	if _, err := g.create("echo", &corralv1.SandboxSpec{Command: []string{"sleep", "infinity"}}); err != nil {
		return nil, nil, err
	}
	certs := filepath.Join(home, "certs")
	if out, err := exec.Command(bin, "--home", home, "gateway", "client-cert", "bench", "--out", certs).CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("client-cert: %v: %s", err, out)
	}
	ctx := context.Background()
	sdk, err := client.New(client.Options{Home: home})
	if err != nil {
		return nil, nil, err
	}
	defer sdk.Close()
	// a member's bearer token, checked by the gateway against its store on
	// every call
	out, err := exec.Command(bin, "--home", home, "token", "create", "--tenant", "default", "--role", "member", "--name", "bench").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("token create: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	withToken, err := client.New(client.Options{Gateway: "https://" + addr, CA: filepath.Join(certs, "ca.crt"), Token: lines[len(lines)-1]})
	if err != nil {
		return nil, nil, err
	}
	defer withToken.Close()
	stdio, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx,
		&mcp.CommandTransport{Command: exec.Command(bin, "--home", home, "mcp", "--keep")}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("corral mcp: %w", err)
	}
	defer stdio.Close()
	tlsCfg, err := tlsauth.ClientConfig(filepath.Join(certs, "ca.crt"), filepath.Join(certs, "bench.crt"), filepath.Join(certs, "bench.key"))
	if err != nil {
		return nil, nil, err
	}
	overHTTPS, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: "https://" + addr + "/mcp", HTTPClient: &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("/mcp: %w", err)
	}
	defer overHTTPS.Close()

	ways := []func() error{
		func() error { return sdkEcho(ctx, sdk) },
		func() error { return sdkEcho(ctx, withToken) },
		func() error {
			out, err := exec.Command(bin, "--home", home, "sandbox", "exec", "echo", "--", "echo", "hi").Output()
			if err == nil && string(out) != "hi\n" {
				err = fmt.Errorf("the CLI printed %q", out)
			}
			return err
		},
		func() error { return mcpEcho(ctx, stdio) },
		func() error { return mcpEcho(ctx, overHTTPS) },
	}
	t := newTable(interfacesTitle, append(slices.Clone(interfaceOps), sdkOps...), []string{"direct gRPC"})
	for i := range n + warmup {
		for j, way := range ways {
			direct, err := timed(func() error { return directEcho(ctx, g.api) })
			if err != nil {
				return nil, nil, fmt.Errorf("direct gRPC: %w", err)
			}
			d, err := timed(way)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", interfaceOps[j], err)
			}
			if i >= warmup {
				t.add(interfaceOps[j], "corral", d)
				t.add(interfaceOps[j], "direct gRPC", direct)
			}
		}
	}
	if err := benchSDKs(ctx, t, g.api, home, n, warmup); err != nil {
		return nil, nil, err
	}
	var figs []*figure
	for _, op := range t.Ops {
		got, direct := stats(t.Times[op]["corral"])[0], stats(t.Times[op]["direct gRPC"])[0]
		bound := time.Duration(float64(direct)*1.5) + 2*time.Millisecond
		met := got <= bound
		figs = append(figs, &figure{Name: op + ", p50", Value: float64(got.Microseconds()) / 1000, Unit: "ms",
			Goal: fmt.Sprintf("≤ 1.5× + 2 ms of direct (%.2f ms)", float64(bound.Microseconds())/1000), Met: &met})
	}
	return t, figs, nil
}

func timed(fn func() error) (time.Duration, error) {
	t0 := time.Now()
	err := fn()
	return time.Since(t0), err
}

// directEcho is the peer: one ExecSandbox call, as generated.
func directEcho(ctx context.Context, api corralv1.SandboxServiceClient) error {
	stream, err := api.ExecSandbox(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&corralv1.ExecRequest{Msg: &corralv1.ExecRequest_Start{Start: &corralv1.ExecStart{Name: "echo", Command: []string{"echo", "hi"}}}}); err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return errors.New("no exit code")
		}
		if err != nil {
			return err
		}
		if code, ok := resp.Msg.(*corralv1.ExecResponse_ExitCode); ok {
			if code.ExitCode != 0 {
				return fmt.Errorf("exit code %d", code.ExitCode)
			}
			return stream.CloseSend()
		}
	}
}

func sdkEcho(ctx context.Context, c *client.Client) error {
	out, err := c.Run(ctx, "echo", "echo", "hi")
	if err == nil && string(out.Stdout) != "hi\n" {
		err = fmt.Errorf("the client package returned %q", out.Stdout)
	}
	return err
}

func mcpEcho(ctx context.Context, cs *mcp.ClientSession) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_exec", Arguments: map[string]any{"name": "echo", "command": []string{"echo", "hi"}}})
	if err != nil {
		return err
	}
	if res.IsError {
		return fmt.Errorf("tool error: %v", res.Content)
	}
	if out, _ := res.StructuredContent.(map[string]any); out["stdout"] != "hi\n" {
		return fmt.Errorf("sandbox_exec returned %v", res.StructuredContent)
	}
	return nil
}

// freeAddr is a free loopback address.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// benchSDKs times the TypeScript and the Python SDKs' echo round trips
// (each SDK's own loop, bench/sdk), each beside as many direct gRPC calls
// made just before it.
func benchSDKs(ctx context.Context, t *table, api corralv1.SandboxServiceClient, home string, n, warmup int) error {
	root := testenv.ModuleRoot()
	runs := [][]string{
		{"node", filepath.Join(root, "bench", "sdk", "echo.mjs"), "echo", strconv.Itoa(n + warmup)},
		{"/usr/bin/python3", filepath.Join(root, "bench", "sdk", "echo.py"), "echo", strconv.Itoa(n + warmup)},
	}
	for i, argv := range runs {
		if why := sdkMissing(root, i); why != "" {
			fmt.Printf("interfaces: %s left out: %s\n", sdkOps[i], why)
			t.Ops = slices.DeleteFunc(t.Ops, func(op string) bool { return op == sdkOps[i] })
			continue
		}
		for range n + warmup {
			d, err := timed(func() error { return directEcho(ctx, api) })
			if err != nil {
				return fmt.Errorf("direct gRPC: %w", err)
			}
			t.add(sdkOps[i], "direct gRPC", d)
		}
		t.Times[sdkOps[i]]["direct gRPC"] = t.Times[sdkOps[i]]["direct gRPC"][warmup:]
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "CORRAL_HOME="+home, "PYTHONPATH="+filepath.Join(root, "sdk", "python"),
			"PYTHONDONTWRITEBYTECODE=1", "CORRAL_SDK="+filepath.Join(root, "sdk", "typescript", "dist", "index.js"))
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("%s (build the SDK first; see its README): %w", sdkOps[i], err)
		}
		lines := strings.Fields(string(out))
		if len(lines) != n+warmup {
			return fmt.Errorf("%s printed %d round trips, want %d", sdkOps[i], len(lines), n+warmup)
		}
		for _, l := range lines[warmup:] {
			ns, err := strconv.ParseInt(l, 10, 64)
			if err != nil {
				return fmt.Errorf("%s printed %q", sdkOps[i], l)
			}
			t.add(sdkOps[i], "corral", time.Duration(ns))
		}
	}
	return nil
}

// sdkMissing says why SDK i of sdkOps cannot run here ("" when it can):
// the bench runs wherever Go does, the SDKs where their runtimes are.
func sdkMissing(root string, i int) string {
	switch sdkOps[i] {
	case "TypeScript SDK":
		if _, err := exec.LookPath("node"); err != nil {
			return "no Node.js"
		}
		if _, err := os.Stat(filepath.Join(root, "sdk", "typescript", "dist", "index.js")); err != nil {
			return "the SDK is not built (npm ci && npm run build in sdk/typescript)"
		}
	case "Python SDK":
		if err := exec.Command("/usr/bin/python3", "-c", "import grpc, google.protobuf").Run(); err != nil {
			return "no python3-grpcio and python3-protobuf"
		}
	}
	return ""
}
