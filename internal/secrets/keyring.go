// Package secrets keeps the values of secrets sealed: AES-256-GCM (the
// standard library's) under a key of the gateway's home, which no sandbox
// sees. A value is bound to its secret's name (the AEAD's additional
// data), so a sealed value moved to another name does not open. The key
// file holds a master key; the sealing key and the fingerprints' key are
// derived from it with HKDF, so a fingerprint says nothing of the key that
// seals.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/corral-sandbox/corral/internal/atomicfile"
)

// keySize is the master key's bytes.
const keySize = 32

// Keyring seals and opens the values of one gateway's secrets.
type Keyring struct {
	aead  cipher.AEAD
	fpKey []byte
	phKey []byte // placeholders'
}

// Load reads the master key at path, making it (32 random bytes, mode
// 0600) when there is none. A key file that others may read, or of the
// wrong size, is refused: it is the one thing that opens every secret.
func Load(path string) (*Keyring, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key = make([]byte, keySize)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		// Of gateways that start at once on a new home, one writes the
		// key and the others read it.
		err := atomicfile.Create(path, key, 0o600)
		if errors.Is(err, fs.ErrExist) {
			key, err = os.ReadFile(path)
		}
		if err != nil {
			return nil, fmt.Errorf("secrets key %s: %w", path, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("secrets key %s: %w", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key %s: %w", path, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets key %s: mode %04o lets others read it: chmod 600 it", path, fi.Mode().Perm())
	}
	if len(key) != keySize {
		return nil, fmt.Errorf("secrets key %s: %d bytes, want %d", path, len(key), keySize)
	}
	return newKeyring(key)
}

func newKeyring(master []byte) (*Keyring, error) {
	sealing, err := hkdf.Key(sha256.New, master, nil, "corral secrets: sealing", 32)
	if err != nil {
		return nil, err
	}
	fpKey, err := hkdf.Key(sha256.New, master, nil, "corral secrets: fingerprints", 32)
	if err != nil {
		return nil, err
	}
	phKey, err := hkdf.Key(sha256.New, master, nil, "corral secrets: placeholders", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(sealing)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Keyring{aead: aead, fpKey: fpKey, phKey: phKey}, nil
}

// Seal seals value as the value of secret name: a random nonce, then the
// ciphertext and its tag.
func (k *Keyring) Seal(name string, value []byte) ([]byte, error) {
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(value)+k.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return k.aead.Seal(nonce, nonce, value, []byte(name)), nil
}

// Open opens what Seal sealed for secret name. Anything else (another
// key, another name, a changed byte) is an error that says nothing of the
// value.
func (k *Keyring) Open(name string, sealed []byte) ([]byte, error) {
	n := k.aead.NonceSize()
	if len(sealed) < n+k.aead.Overhead() {
		return nil, fmt.Errorf("secret %q: its sealed value is cut short", name)
	}
	value, err := k.aead.Open(nil, sealed[:n], sealed[n:], []byte(name))
	if err != nil {
		return nil, fmt.Errorf("secret %q: its sealed value does not open with this gateway's key", name)
	}
	return value, nil
}

// Fingerprint names a value without revealing it: the first 8 bytes of an
// HMAC-SHA256 under a key of the gateway's, in hex ("fp:0123…"). Equal
// values have equal fingerprints on one gateway; without the key nothing
// can be learnt of the value, not even by trying guesses.
func (k *Keyring) Fingerprint(value []byte) string {
	m := hmac.New(sha256.New, k.fpKey)
	m.Write(value)
	return "fp:" + hex.EncodeToString(m.Sum(nil)[:8])
}

// PlaceholderPrefix starts every placeholder: what the egress proxy looks
// for in what a sandbox sends.
const PlaceholderPrefix = "corral_ph_"

// placeholderText is how a placeholder's random part is written: lower
// case letters and digits, safe in a header, a URL and a Basic user name.
var placeholderText = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Placeholder is what a sandbox's incarnation sees in place of a
// credential's value (role: "" for the value, or a second part's name such
// as an access key id): an HMAC under a key of the gateway's of the
// sandbox's id, the incarnation and the credential, so it differs for
// every incarnation, is worthless outside it, and is known to the proxy
// without being kept anywhere.
func (k *Keyring) Placeholder(id string, generation int64, credential, role string) string {
	m := hmac.New(sha256.New, k.phKey)
	fmt.Fprintf(m, "%s\x00%d\x00%s\x00%s", id, generation, credential, role)
	return PlaceholderPrefix + placeholderText.EncodeToString(m.Sum(nil)[:20])
}
