// Package tlsauth is the gateway's mutual TLS: its own certificate
// authority in the home directory, the server certificate, client
// certificates it issues, and their revocation, persisted across restarts.
package tlsauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/corral-sandbox/corral/internal/atomicfile"
)

// Validity periods of what the CA signs.
const (
	caValidity     = 10 * 365 * 24 * time.Hour
	serverValidity = 397 * 24 * time.Hour
	ClientValidity = 365 * 24 * time.Hour
)

// CA is the gateway's certificate authority, kept in Dir (HOME/tls).
type CA struct {
	Dir  string
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// File names in the CA directory.
const (
	caCertFile     = "ca.crt"
	caKeyFile      = "ca.key"
	serverCertFile = "server.crt"
	serverKeyFile  = "server.key"
	issuedFile     = "issued.json"
	revokedFile    = "revoked.json"
)

// LoadOrCreateCA loads the CA in dir, creating it on first use.
func LoadOrCreateCA(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	if _, err := os.Stat(certPath); errors.Is(err, os.ErrNotExist) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		tmpl := CATemplate("corral gateway CA", "corral", caValidity)
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			return nil, err
		}
		if err := writeKey(keyPath, key); err != nil {
			return nil, err
		}
		if err := writeCert(certPath, der); err != nil {
			return nil, err
		}
	}
	cert, err := readCert(certPath)
	if err != nil {
		return nil, err
	}
	key, err := readKey(keyPath)
	if err != nil {
		return nil, err
	}
	return &CA{Dir: dir, Cert: cert, key: key}, nil
}

// sign issues a certificate for a new key and writes both (mode 0600).
func (ca *CA) sign(tmpl *x509.Certificate, certPath, keyPath string) (*x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	if err := writeKey(keyPath, key); err != nil {
		return nil, err
	}
	if err := writeCert(certPath, der); err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// EnsureServerCert returns the server certificate's paths, issuing a new
// one when there is none, it expires within 30 days, or it lacks a name.
// 127.0.0.1, ::1 and localhost are always among its names.
func (ca *CA) EnsureServerCert(names []string) (certPath, keyPath string, err error) {
	certPath, keyPath = filepath.Join(ca.Dir, serverCertFile), filepath.Join(ca.Dir, serverKeyFile)
	dns, ips := []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			ips = append(ips, ip)
		} else if n != "" {
			dns = append(dns, n)
		}
	}
	unlock, err := lockDir(ca.Dir)
	if err != nil {
		return "", "", err
	}
	defer unlock()
	// A crash between the writes of a new key and its certificate left a
	// pair that does not match: it is issued again.
	if cur, err := tls.LoadX509KeyPair(certPath, keyPath); err == nil && time.Until(cur.Leaf.NotAfter) > 30*24*time.Hour && covers(cur.Leaf, dns, ips) {
		return certPath, keyPath, nil
	}
	_, err = ca.sign(&x509.Certificate{
		SerialNumber: newSerial(),
		Subject:      pkix.Name{CommonName: "corral gateway", Organization: []string{"corral"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(serverValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}, certPath, keyPath)
	return certPath, keyPath, err
}

func covers(c *x509.Certificate, dns []string, ips []net.IP) bool {
	for _, d := range dns {
		if !slices.Contains(c.DNSNames, d) {
			return false
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// IssueClient issues a client certificate for name into dir as NAME.crt
// and NAME.key (mode 0600), with a copy of the CA certificate as ca.crt,
// and records it so that it can be revoked by name. uris go in it as
// subject alternative names (the caller it names: its tenant and role).
func (ca *CA) IssueClient(name, dir string, validFor time.Duration, uris ...*url.URL) (*x509.Certificate, error) {
	if name == "" {
		return nil, errors.New("a client certificate needs a name")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	now := time.Now()
	cert, err := ca.sign(&x509.Certificate{
		SerialNumber: newSerial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"corral clients"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validFor),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:         uris,
	}, filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
	if err != nil {
		return nil, err
	}
	if err := writeCert(filepath.Join(dir, caCertFile), ca.Cert.Raw); err != nil {
		return nil, err
	}
	return cert, ca.recordIssued(cert)
}

// CATemplate is the certificate of a new CA (self-signed, signing leaves
// only: no intermediate below it), valid from an hour ago for validFor.
func CATemplate(commonName, organization string, validFor time.Duration) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber:          newSerial(),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{organization}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
}

func newSerial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePrivate(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

func writeCert(path string, der []byte) error {
	return writePrivate(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// lockDir takes an exclusive lock on dir's lock file, so that processes
// that start at once on one home make one CA and one server certificate,
// and returns its release.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil // closing the file releases the lock
}

// writePrivate writes a file with mode 0600, atomically.
func writePrivate(path string, data []byte) error {
	return atomicfile.Write(path, data, 0o600)
}

func readCert(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM certificate", path)
	}
	return x509.ParseCertificate(block.Bytes)
}

func readKey(path string) (*ecdsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM key", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an ECDSA key", path)
	}
	return key, nil
}
