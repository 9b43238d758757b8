package images

import (
	"io"

	"github.com/corral-sandbox/corral/internal/safetar"
)

// The unpacking of layers is internal/safetar's, in its layer format.
type (
	limits  = safetar.Limits
	refusal = safetar.Refusal
)

var (
	defaultLimits = safetar.DefaultLimits
	errNeedRoot   = safetar.ErrNeedRoot
)

// untar unpacks a layer's tar stream r into dir, which must exist and be
// empty, in overlayfs's format. An entry it refuses is a *refusal; it stops
// at the first. asRoot (the process is root) keeps the headers' owners and
// makes whiteouts.
func untar(r io.Reader, dir string, lim limits, asRoot bool) (safetar.Stats, error) {
	return safetar.UnpackDir(r, dir, safetar.Options{Limits: lim, Layer: true, Chown: asRoot})
}
