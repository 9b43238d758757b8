package images

import (
	"errors"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// Check says what is wrong with ref without fetching anything: a reference
// that does not parse, or an archive or layout path that is not absolute
// or does not exist (errdefs.ErrInvalidArgument), or nil.
func Check(ref string) error {
	if isPlain(ref) {
		if _, err := name.ParseReference(ref); err != nil {
			return errdefs.InvalidArgument("image %q: not a valid reference: %v", ref, err)
		}
		return nil
	}
	prefix := ociPrefix
	if strings.HasPrefix(ref, archivePrefix) {
		prefix = archivePrefix
	}
	_, _, err := splitFileRef(ref, prefix)
	if errors.Is(err, errdefs.ErrNotFound) {
		return errdefs.InvalidArgument("%v", err)
	}
	return err
}
