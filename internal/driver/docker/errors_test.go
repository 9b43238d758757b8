package docker

import (
	"errors"
	"fmt"
	"testing"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// The engine's error classes become ours, the engine's error kept as the
// cause; what has no class of ours stays unclassed.
func TestEngineErrorsKeepTheirClass(t *testing.T) {
	d := &Driver{host: "unix:///test.sock"}
	for _, tc := range []struct {
		engine error
		class  error
	}{
		{cerrdefs.ErrNotFound, errdefs.ErrNotFound},
		{cerrdefs.ErrInvalidArgument, errdefs.ErrInvalidArgument},
		{cerrdefs.ErrConflict, errdefs.ErrFailedPrecondition},
		{cerrdefs.ErrFailedPrecondition, errdefs.ErrFailedPrecondition},
		{cerrdefs.ErrAlreadyExists, errdefs.ErrAlreadyExists},
		{cerrdefs.ErrInternal, nil},
	} {
		engine := fmt.Errorf("Error response from daemon: %w", tc.engine)
		err := d.wrap(engine, "create container")
		if !errors.Is(err, engine) {
			t.Errorf("%v: the engine's error is not its cause", err)
		}
		for _, class := range []error{errdefs.ErrNotFound, errdefs.ErrInvalidArgument, errdefs.ErrFailedPrecondition, errdefs.ErrAlreadyExists} {
			if errors.Is(err, class) != (class == tc.class) {
				t.Errorf("%v: class %v is %v, want %v", err, class, errors.Is(err, class), class == tc.class)
			}
		}
	}
}
