package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// engineWait bounds how long the engine may take to answer before a pull
// goes to the registry instead.
const engineWait = 2 * time.Second

// fromEngine looks ref up in the local Docker engine's image store. found
// is false (and err nil) when no engine answers within engineWait or it
// lacks the image: the caller then asks the registry. A found image is
// exported (ImageSave) into dir/tmp and read as a docker save archive;
// release removes the export.
func (s *Store) fromEngine(ctx context.Context, ref string) (r *resolved, release func(), found bool, err error) {
	release = func() {}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if s.opts.DockerHost != "" {
		opts = append(opts, client.WithHost(s.opts.DockerHost))
	}
	api, err := client.New(opts...)
	if err != nil {
		slog.Debug("images: no docker engine", "err", err)
		return nil, release, false, nil
	}
	defer api.Close()
	quick, cancel := context.WithTimeout(ctx, engineWait)
	defer cancel()
	if _, err := api.Ping(quick, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		slog.Debug("images: the docker engine does not answer; asking the registry", "ref", ref, "err", err)
		return nil, release, false, ctx.Err()
	}
	inspect, err := api.ImageInspect(quick, ref)
	if err != nil {
		if !cerrdefs.IsNotFound(err) {
			slog.Debug("images: the docker engine could not inspect the image; asking the registry", "ref", ref, "err", err)
		}
		return nil, release, false, ctx.Err()
	}
	file, release, err := s.tempPath("engine", false)
	if err != nil {
		return nil, func() {}, true, err
	}
	if err := s.export(ctx, api, inspect.ID, file); err != nil {
		release()
		return nil, func() {}, true, errdefs.Unavailable("image %q: export from the docker engine: %v", ref, err)
	}
	r, err = readArchive(ref, file, nil)
	if err == nil && r.id != inspect.ID {
		err = errdefs.InvalidArgument("image %q: the docker engine exported %s for image %s", ref, r.id, inspect.ID)
	}
	if err != nil {
		release()
		return nil, func() {}, true, err
	}
	return r, release, true, nil
}

// export writes the engine's `docker save` of image id into file.
func (s *Store) export(ctx context.Context, api *client.Client, id, file string) error {
	rc, err := api.ImageSave(ctx, []string{id})
	if err != nil {
		return err
	}
	defer rc.Close()
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// resolveRegistry reads ref's manifest and config from its registry
// (credentials from the Docker config, as `docker login` wrote them); a
// multi-platform image gives its linux image for this machine.
func resolveRegistry(ctx context.Context, ref string) (*resolved, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, errdefs.InvalidArgument("image %q: not a valid reference: %v", ref, err)
	}
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		return nil, registryErr(ref, r.Context().RegistryStr(), err)
	}
	res, err := fromManifest(ref, img, true)
	if err != nil {
		return nil, registryErr(ref, r.Context().RegistryStr(), err)
	}
	return res, nil
}

// registryErr classes a registry's error: an unknown image is NotFound, a
// registry that does not answer Unavailable.
func registryErr(ref, registry string, err error) error {
	var terr *transport.Error
	var nerr net.Error
	var oerr *net.OpError
	switch {
	case errors.Is(err, errdefs.ErrInvalidArgument), errors.Is(err, errdefs.ErrNotFound),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &terr):
		switch {
		case terr.StatusCode == http.StatusNotFound:
			return errdefs.NotFound("image %q: registry %s does not have it: %v", ref, registry, err)
		case terr.StatusCode == http.StatusUnauthorized, terr.StatusCode == http.StatusForbidden:
			return errdefs.NotFound("image %q: registry %s does not have it or refuses access (docker login?): %v", ref, registry, err)
		case terr.StatusCode >= 500:
			return errdefs.Unavailable("image %q: registry %s: %v", ref, registry, err)
		}
		for _, d := range terr.Errors {
			if d.Code == transport.ManifestUnknownErrorCode || d.Code == transport.NameUnknownErrorCode {
				return errdefs.NotFound("image %q: registry %s does not have it: %v", ref, registry, err)
			}
		}
	case errors.As(err, &oerr), errors.As(err, &nerr):
		return errdefs.Unavailable("image %q: registry %s does not answer: %v", ref, registry, err)
	}
	return fmt.Errorf("image %q: registry %s: %w", ref, registry, err)
}
