package tlsauth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// issued is one client certificate the CA signed.
type issued struct {
	Name     string    `json:"name"`
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"not_after"`
	// URIs are its subject alternative names that are URIs (the caller
	// it names, such as corral:TENANT/ROLE).
	URIs []string `json:"uris,omitempty"`
}

// revoked is one revoked client certificate.
type revoked struct {
	Name      string    `json:"name"`
	Serial    string    `json:"serial"`
	RevokedAt time.Time `json:"revoked_at"`
}

func readJSON[T any](path string) ([]T, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var list []T
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return list, nil
}

func writeJSON[T any](path string, list []T) error {
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	return writePrivate(path, data)
}

func (ca *CA) recordIssued(c *x509.Certificate) error {
	path := filepath.Join(ca.Dir, issuedFile)
	list, err := readJSON[issued](path)
	if err != nil {
		return err
	}
	e := issued{Name: c.Subject.CommonName, Serial: c.SerialNumber.Text(16), NotAfter: c.NotAfter}
	for _, u := range c.URIs {
		e.URIs = append(e.URIs, u.String())
	}
	list = append(list, e)
	return writeJSON(path, list)
}

// Without returns the names of the unexpired, unrevoked client
// certificates the CA issued with no URI of scheme: older ones, from
// before the gateway named callers' tenants in them.
func (ca *CA) Without(scheme string) ([]string, error) {
	list, err := readJSON[issued](filepath.Join(ca.Dir, issuedFile))
	if err != nil {
		return nil, err
	}
	gone, err := readJSON[revoked](filepath.Join(ca.Dir, revokedFile))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	now := time.Now()
	for _, e := range list {
		if !now.Before(e.NotAfter) || slices.ContainsFunc(gone, func(r revoked) bool { return r.Serial == e.Serial }) ||
			slices.ContainsFunc(e.URIs, func(u string) bool { return strings.HasPrefix(u, scheme+":") }) {
			continue
		}
		out[e.Name] = true
	}
	return slices.Sorted(maps.Keys(out)), nil
}

// Revoke revokes every certificate issued to name; a gateway refuses them
// from its next handshake on. It returns how many it revoked.
func (ca *CA) Revoke(name string) (int, error) {
	certs, err := readJSON[issued](filepath.Join(ca.Dir, issuedFile))
	if err != nil {
		return 0, err
	}
	path := filepath.Join(ca.Dir, revokedFile)
	list, err := readJSON[revoked](path)
	if err != nil {
		return 0, err
	}
	done := map[string]bool{}
	for _, r := range list {
		done[r.Serial] = true
	}
	n := 0
	for _, c := range certs {
		if c.Name == name && !done[c.Serial] {
			list = append(list, revoked{Name: name, Serial: c.Serial, RevokedAt: time.Now().UTC()})
			n++
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("no certificate issued to %q is left to revoke", name)
	}
	return n, writeJSON(path, list)
}

// revocations is the revoked list as a gateway sees it, read again
// whenever the file changes.
type revocations struct {
	path    string
	mu      sync.Mutex
	mod     time.Time
	serials map[string]string // serial -> name
}

func (r *revocations) check(serial string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	fi, err := os.Stat(r.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		r.serials, r.mod = nil, time.Time{}
	case err != nil:
		return fmt.Errorf("read the revocation list: %w", err) // fail closed
	case !fi.ModTime().Equal(r.mod):
		list, err := readJSON[revoked](r.path)
		if err != nil {
			return fmt.Errorf("read the revocation list: %w", err)
		}
		r.serials = map[string]string{}
		for _, e := range list {
			r.serials[e.Serial] = e.Name
		}
		r.mod = fi.ModTime()
	}
	if name, ok := r.serials[serial]; ok {
		return fmt.Errorf("the client certificate of %q has been revoked", name)
	}
	return nil
}

// ServerConfig is the gateway's TLS: TLS 1.3 only, a client certificate,
// when one is given, signed by the CA, revoked ones refused at the
// handshake. A connection without one must bring a bearer token with each
// request, which the gateway checks before anything else.
func (ca *CA) ServerConfig(certPath, keyPath string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return ca.serverConfig(certPath, keyPath, pool)
}

// ServerConfigWith is ServerConfig with a server certificate and a client
// CA of the operator's own; revocation by name still covers what this CA
// issued.
func (ca *CA) ServerConfigWith(certPath, keyPath, clientCAPath string) (*tls.Config, error) {
	data, err := os.ReadFile(clientCAPath)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("client CA %s: no PEM certificate in it", clientCAPath)
	}
	return ca.serverConfig(certPath, keyPath, pool)
}

func (ca *CA) serverConfig(certPath, keyPath string, pool *x509.CertPool) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("server certificate: %w", err)
	}
	rev := &revocations{path: filepath.Join(ca.Dir, revokedFile)}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    pool,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return nil // a token's connection
			}
			return rev.check(cs.PeerCertificates[0].SerialNumber.Text(16))
		},
	}, nil
}

// ClientConfig is a client's TLS to a gateway: TLS 1.3 only, the gateway's
// CA as the only root, and the client's own certificate.
func ClientConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("CA certificate %s: no PEM certificate in it", caFile)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}
	if certFile != "" || keyFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
