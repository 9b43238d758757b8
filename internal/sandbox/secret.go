package sandbox

import (
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// Secret is a secret as the store keeps it: its value sealed (package
// secrets), never in the clear.
type Secret struct {
	Name   string
	Tenant string
	// Sealed is the value as the gateway's keyring sealed it.
	Sealed []byte
	// Fingerprint names the value without revealing it (keyed hash).
	Fingerprint          string
	CreatedAt, UpdatedAt time.Time
}

// ValidateSecretName checks a secret's name: a DNS label, as a sandbox's.
func ValidateSecretName(name string) error {
	return validDNSLabel("secret", name, 63)
}

// validDNSLabel checks the name of a what: a DNS label of at most max
// characters.
func validDNSLabel(what, name string, max int) error {
	switch {
	case name == "":
		return errdefs.InvalidArgument("%s name is empty", what)
	case len(name) > max:
		return errdefs.InvalidArgument("invalid %s name %q: longer than %d characters", what, name, max)
	case !nameRE.MatchString(name):
		return errdefs.InvalidArgument("invalid %s name %q: use lower-case letters, digits and '-', starting and ending with a letter or digit", what, name)
	}
	return nil
}
