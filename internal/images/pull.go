package images

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// PullOptions change what Pull does.
type PullOptions struct {
	// Always resolves a plain reference at its source even when the cache
	// has it (a tag that may have moved).
	Always bool
}

// Pull resolves ref and makes its image and every layer present, unpacked.
// ref is one of
//
//	oci:/abs/dir[:tag-or-digest]           an OCI image layout directory: its only
//	                                       image, or the one whose digest or
//	                                       org.opencontainers.image.ref.name is given
//	docker-archive:/abs/file.tar[:repo:tag] a `docker save` archive
//	name[:tag][@digest]                    the local Docker engine's image when
//	                                       the engine answers within 2 s and has
//	                                       it, else the registry's
//
// A plain reference the cache already has is not fetched again (unless
// opts say Always). Layers already present are not read again. progress,
// if not nil, is called with each step, from the calling goroutine.
//
// Errors: errdefs.ErrInvalidArgument for a malformed ref and for a layer
// refused (it names the layer, the entry and why), ErrNotFound for an image
// its source lacks, ErrUnavailable for a registry or engine that does not
// answer, ErrFailedPrecondition for an image with whiteouts in a process
// that is not root.
func (s *Store) Pull(ctx context.Context, ref string, progress func(Progress), opts ...PullOptions) (Image, error) {
	var o PullOptions
	for _, op := range opts {
		o.Always = o.Always || op.Always
	}
	emit := func(p Progress) {
		if progress != nil {
			progress(p)
		}
	}
	emit(Progress{Status: "resolving"})
	if isPlain(ref) && !o.Always {
		if img, ok := s.cached(ref); ok {
			for _, l := range img.Layers {
				emit(Progress{Layer: l, Status: "cached"})
			}
			emit(Progress{Status: "done"})
			return img, nil
		}
	}
	r, release, err := s.resolve(ctx, ref)
	defer release()
	if err != nil {
		return Image{}, err
	}
	diffIDs := make([]string, len(r.layers))
	for i, b := range r.layers {
		diffIDs[i] = b.diffID.String()
	}
	unpin := s.pin(diffIDs)
	defer unpin()
	img := Image{ID: r.id, Refs: []string{ref}, Layers: diffIDs, Config: r.config}
	for _, b := range r.layers {
		b.unpacked = min(maxLayerBytes, maxImageBytes-img.Size)
		if b.unpacked <= 0 {
			return Image{}, errdefs.InvalidArgument("image %q: its layers unpack to more than %d bytes, all corral unpacks of one image", ref, maxImageBytes)
		}
		if err := s.ensureLayer(ctx, ref, b, emit); err != nil {
			return Image{}, err
		}
		n, err := s.layerSize(b.diffID.String())
		if err != nil {
			return Image{}, err
		}
		img.Size += n
	}
	img.Pulled = time.Now().UTC()
	img, err = s.record(img)
	if err != nil {
		return Image{}, err
	}
	emit(Progress{Status: "done"})
	return img, nil
}

// cached returns the image a plain ref names when it and all its layers
// are in the cache.
func (s *Store) cached(ref string) (Image, bool) {
	img, err := s.Get(ref)
	if err != nil {
		return Image{}, false
	}
	for _, l := range img.Layers {
		if _, err := os.Stat(s.LayerPath(l)); err != nil {
			return Image{}, false
		}
	}
	return img, true
}

// pin keeps layers from Remove and Prune while a pull uses them.
func (s *Store) pin(diffIDs []string) (unpin func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range diffIDs {
		s.pinned[d]++
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, d := range diffIDs {
			if s.pinned[d]--; s.pinned[d] <= 0 {
				delete(s.pinned, d)
			}
		}
	}
}

// record puts a pulled image into the index: a known id gains ref, and a
// ref another image had moves to this one.
func (s *Store) record(img Image) (Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref := img.Refs[0]
	before := map[string]*Image{}
	for id, other := range s.images {
		before[id] = other
	}
	for id, other := range s.images {
		if id == img.ID || !slices.Contains(other.Refs, ref) {
			continue
		}
		moved := clone(other)
		moved.Refs = slices.DeleteFunc(moved.Refs, func(r string) bool { return r == ref })
		s.images[id] = &moved
	}
	if old, ok := s.images[img.ID]; ok {
		img.Refs = old.Refs
		if !slices.Contains(img.Refs, ref) {
			img.Refs = append(slices.Clone(img.Refs), ref)
		}
		img.Pulled = old.Pulled
	}
	s.images[img.ID] = &img
	if err := s.writeIndexLocked(); err != nil {
		s.images = before
		return Image{}, err
	}
	return clone(&img), nil
}

// ensureLayer makes b present: cached, or unpacked here, or by a
// concurrent pull of the same diff id that this one waits for.
func (s *Store) ensureLayer(ctx context.Context, ref string, b blob, emit func(Progress)) error {
	id := b.diffID.String()
	for {
		if _, err := os.Stat(s.LayerPath(id)); err == nil {
			emit(Progress{Layer: id, Status: "cached"})
			return nil
		}
		c, leader := s.flight.begin(id)
		if !leader {
			select {
			case <-c.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			if c.err != nil && !errors.Is(c.err, context.Canceled) && !errors.Is(c.err, context.DeadlineExceeded) {
				return c.err
			}
			continue // present now, or its puller gave up: try again
		}
		err := s.fetchAndUnpack(ctx, ref, b, emit)
		s.flight.end(id, c, err)
		return err
	}
}

func (s *Store) fetchAndUnpack(ctx context.Context, ref string, b blob, emit func(Progress)) error {
	if _, err := os.Stat(s.LayerPath(b.diffID.String())); err == nil {
		emit(Progress{Layer: b.diffID.String(), Status: "cached"}) // placed before this began
		return nil
	}
	if b.remote {
		local, release, err := s.download(ctx, ref, b, emit)
		if err != nil {
			return err
		}
		defer release()
		b = local
	}
	return s.unpack(ctx, ref, b, emit)
}

// flight lets one caller at a time work on a key; the others wait for it.
type flight struct {
	mu    sync.Mutex
	calls map[string]*call
}

type call struct {
	done chan struct{}
	err  error
}

// begin returns the key's call in flight, or a new one that the caller
// leads and must end.
func (f *flight) begin(key string) (c *call, leader bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.calls[key]; ok {
		return c, false
	}
	if f.calls == nil {
		f.calls = map[string]*call{}
	}
	c = &call{done: make(chan struct{})}
	f.calls[key] = c
	return c, true
}

func (f *flight) end(key string, c *call, err error) {
	f.mu.Lock()
	delete(f.calls, key)
	f.mu.Unlock()
	c.err = err
	close(c.done)
}
