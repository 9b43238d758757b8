package tlsauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// server is a gRPC server with the gateway's TLS and a handler counter.
type server struct {
	addr  string
	calls atomic.Int64
}

func startServer(t *testing.T, ca *CA) *server {
	t.Helper()
	certPath, keyPath, err := ca.EnsureServerCert(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ca.ServerConfig(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			s.calls.Add(1)
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return s
}

func check(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func clientCreds(t *testing.T, ca *CA, dir, name string, validFor time.Duration, tweak func(*tls.Config)) credentials.TransportCredentials {
	t.Helper()
	return credentials.NewTLS(clientTLS(t, ca, dir, name, validFor, tweak))
}

func clientTLS(t *testing.T, ca *CA, dir, name string, validFor time.Duration, tweak func(*tls.Config)) *tls.Config {
	t.Helper()
	if _, err := ca.IssueClient(name, dir, validFor); err != nil {
		t.Fatal(err)
	}
	cfg, err := ClientConfig(filepath.Join(dir, "ca.crt"), filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
	if err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(cfg)
	}
	return cfg
}

func TestOnlyValidClientCertificatesReachAHandler(t *testing.T) {
	ca, err := LoadOrCreateCA(filepath.Join(t.TempDir(), "tls"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := LoadOrCreateCA(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, ca)
	dir := t.TempDir()

	if err := check(t, s.addr, clientCreds(t, ca, dir, "alice", ClientValidity, nil)); err != nil {
		t.Fatalf("a valid certificate was refused: %v", err)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("handler calls = %d, want 1", n)
	}

	noCert, err := ClientConfig(filepath.Join(dir, "ca.crt"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	foreignDir := t.TempDir()
	foreign := clientTLS(t, other, foreignDir, "mallory", ClientValidity, func(c *tls.Config) {
		c.RootCAs = noCert.RootCAs // trusts our server, but its cert is from another CA
	})
	expired := clientTLS(t, ca, dir, "old", -30*time.Minute, nil)
	revokedTLS := clientTLS(t, ca, dir, "bob", ClientValidity, nil)
	if _, err := ca.Revoke("bob"); err != nil {
		t.Fatal(err)
	}
	tls12 := clientTLS(t, ca, dir, "carol", ClientValidity, func(c *tls.Config) {
		c.MinVersion, c.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	})
	refused := []struct {
		name string
		cfg  *tls.Config
		want string // in the diagnosis a client shows
	}{
		{"certificate from another CA", foreign, "refused this client certificate"},
		{"expired certificate", expired, "refused this client certificate"},
		{"revoked certificate", revokedTLS, "refused this client certificate"},
		{"TLS 1.2 downgrade", tls12, "TLS 1.3 only"},
	}
	for _, tc := range refused {
		if err := check(t, s.addr, credentials.NewTLS(tc.cfg)); err == nil {
			t.Errorf("%s: the RPC succeeded", tc.name)
		}
		if err := Diagnose(s.addr, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: diagnosis %v, want %q", tc.name, err, tc.want)
		}
	}
	// A connection without a certificate is a token's: the handshake takes
	// it, and the gateway's gate refuses each request that brings no valid
	// token (internal/service).
	if err := Diagnose(s.addr, noCert); err != nil {
		t.Errorf("diagnosis of a client without a certificate: %v", err)
	}
	if err := Diagnose(s.addr, clientTLS(t, ca, dir, "fine", ClientValidity, nil)); err != nil {
		t.Errorf("diagnosis of a valid client: %v", err)
	}
	if err := check(t, s.addr, insecure.NewCredentials()); err == nil {
		t.Error("plaintext gRPC: the RPC succeeded")
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + s.addr + "/")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP got 200")
		}
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("handler calls = %d after the refused clients, want still 1", n)
	}
	// revocation is by certificate: a new certificate for bob works
	if err := check(t, s.addr, clientCreds(t, ca, t.TempDir(), "bob", ClientValidity, nil)); err != nil {
		t.Fatalf("a reissued certificate was refused: %v", err)
	}
}

func TestRevocationPersistsAcrossRestarts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	creds := clientCreds(t, ca, out, "dave", ClientValidity, nil)
	if _, err := ca.Revoke("dave"); err != nil {
		t.Fatal(err)
	}
	again, err := LoadOrCreateCA(dir) // a restarted gateway
	if err != nil {
		t.Fatal(err)
	}
	if again.Cert.SerialNumber.Cmp(ca.Cert.SerialNumber) != 0 {
		t.Fatal("the CA was recreated instead of loaded")
	}
	s := startServer(t, again)
	if err := check(t, s.addr, creds); err == nil {
		t.Fatal("a revoked certificate was accepted after a restart")
	}
	if _, err := again.Revoke("nobody"); err == nil || !strings.Contains(err.Error(), `"nobody"`) {
		t.Fatalf("revoking an unknown name: %v", err)
	}
}

func TestKeysAndCertificatesAreMode0600(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.EnsureServerCert([]string{"gateway.test", "127.0.0.2"}); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if _, err := ca.IssueClient("erin", out, ClientValidity); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, out} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			fi, _ := e.Info()
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s has mode %o, want 600", filepath.Join(d, e.Name()), fi.Mode().Perm())
			}
		}
	}
	cert, err := readCert(filepath.Join(dir, serverCertFile))
	if err != nil {
		t.Fatal(err)
	}
	if !covers(cert, []string{"localhost", "gateway.test"}, nil) || len(cert.IPAddresses) != 3 {
		t.Fatalf("server names: %v %v", cert.DNSNames, cert.IPAddresses)
	}
}

// Gateways that start at once on one new home make one CA and one server
// certificate that matches its key.
func TestStartsAtOnceMakeOneCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	var wg sync.WaitGroup
	cas := make([]*CA, 8)
	errs := make([]error, 8)
	for i := range cas {
		wg.Go(func() {
			if cas[i], errs[i] = LoadOrCreateCA(dir); errs[i] == nil {
				_, _, errs[i] = cas[i].EnsureServerCert(nil)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		if !cas[i].Cert.Equal(cas[0].Cert) {
			t.Fatalf("start %d has a CA of its own", i)
		}
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, serverCertFile), filepath.Join(dir, serverKeyFile)); err != nil {
		t.Fatal(err)
	}
}

// A crash between the writes of a new server key and its certificate
// left a pair that does not match: the next start issues a new one.
func TestAMismatchedServerPairIsIssuedAgain(t *testing.T) {
	ca, err := LoadOrCreateCA(filepath.Join(t.TempDir(), "tls"))
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath, err := ca.EnsureServerCert(nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeKey(keyPath, other); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.EnsureServerCert(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(certPath, keyPath); err != nil {
		t.Fatalf("after the next start: %v", err)
	}
}
