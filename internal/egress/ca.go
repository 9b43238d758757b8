package egress

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
	"net/netip"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/tlsauth"
)

// CA is a sandbox's certificate authority: the proxy signs with it the
// leaf certificates it shows the sandbox's clients for inspected hosts. Its
// certificate is what the sandbox trusts; its key never enters the sandbox.
type CA struct {
	cert    *x509.Certificate
	certDER []byte
	key     *ecdsa.PrivateKey
	leafKey *ecdsa.PrivateKey // one key for every leaf: signing, not key generation, per host

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// leafLife is how long a leaf certificate is valid; a cached one is renewed
// when less than half of it is left.
const leafLife = 48 * time.Hour

// maxLeaves bounds the leaf cache; past it, the cache starts again.
const maxLeaves = 1024

// NewCA makes a CA (ECDSA P-256, ten years) named commonName.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := tlsauth.CATemplate(commonName, "corral egress", 10*365*24*time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return LoadCA(certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
}

// LoadCA reads a CA saved with PEM: a certificate and its ECDSA key
// (PKCS #8 or SEC 1).
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("egress CA: want a PEM certificate and a PEM key")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("egress CA: the certificate is not a CA's")
	}
	var key *ecdsa.PrivateKey
	if k, err := x509.ParsePKCS8PrivateKey(kb.Bytes); err == nil {
		key, _ = k.(*ecdsa.PrivateKey)
	} else if key, err = x509.ParseECPrivateKey(kb.Bytes); err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	if key == nil || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("egress CA: the key is not the certificate's (an ECDSA key is wanted)")
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, certDER: cb.Bytes, key: key, leafKey: leafKey, leaves: map[string]*tls.Certificate{}}, nil
}

// PEM returns the CA's certificate and key, to be saved and given back to
// LoadCA.
func (c *CA) PEM() (certPEM, keyPEM []byte) {
	der, err := x509.MarshalPKCS8PrivateKey(c.key)
	if err != nil {
		panic(err) // an ECDSA P-256 key always marshals
	}
	return c.CertPEM(), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// CertPEM returns the CA's certificate: what the sandbox trusts.
func (c *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.certDER})
}

// Leaf returns a certificate for host (a name or an IP address) signed by
// the CA, from the cache while it is fresh: what the proxy shows a client
// for an inspected host (tests and benchmarks also give it to servers).
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[host]; ok && now.Before(l.Leaf.NotAfter.Add(-leafLife/2)) {
		return l, nil
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &c.leafKey.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.certDER}, PrivateKey: c.leafKey, Leaf: parsed}
	if len(c.leaves) >= maxLeaves {
		clear(c.leaves)
	}
	c.leaves[host] = l
	return l, nil
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}
