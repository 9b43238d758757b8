package images

import (
	"github.com/corral-sandbox/corral/internal/errdefs"
)

// What one image may be: checked, with the reason, before any layer is
// unpacked (its number of layers, the size of its config) or as it is
// (its bytes). A small archive can declare or unpack to a great deal.
const (
	// MaxLayers bounds an image's layers (overlayfs stacks at most ~500;
	// Docker builds at most 127).
	MaxLayers = 128
	// MaxConfigBytes bounds an image's config, read whole.
	MaxConfigBytes = 4 << 20
)

// maxLayerBytes bounds the files of one unpacked layer, and maxImageBytes
// those of all the layers an image unpacks (variables: tests shrink them).
var (
	maxLayerBytes int64 = 8 << 30
	maxImageBytes int64 = 16 << 30
)

// checkShape refuses an image of more than MaxLayers layers or with a
// config of more than MaxConfigBytes, before anything is read of it.
func checkShape(ref string, layers int, configBytes int64) error {
	switch {
	case layers > MaxLayers:
		return errdefs.InvalidArgument("image %q has %d layers, more than the %d corral unpacks", ref, layers, MaxLayers)
	case configBytes > MaxConfigBytes:
		return errdefs.InvalidArgument("image %q has a config of %d bytes, more than the %d corral reads", ref, configBytes, MaxConfigBytes)
	}
	return nil
}
