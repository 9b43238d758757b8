// Package images keeps OCI images, unpacked, for drivers that run them from
// layers on the host (the native driver): a content-addressed cache in which
// each layer is unpacked once per diff id and shared read-only by every
// sandbox of every image that has it.
//
// An image comes from the local Docker engine's image store when one
// answers, from an OCI layout directory ("oci:/path"), a `docker save`
// archive ("docker-archive:/path.tar"), or a registry (credentials from
// ~/.docker/config.json). Registries, archives and layers are read with
// go-containerregistry; the unpacking is this package's own, because it
// must refuse (not rewrite) an entry that would land outside its layer.
package images

import "time"

// Image is an image in the cache.
type Image struct {
	// ID is the digest of the image's config, "sha256:…".
	ID string `json:"id"`
	// Refs are the names it was pulled as, as given.
	Refs []string `json:"refs"`
	// Layers are its layers' diff ids, bottom first.
	Layers []string `json:"layers"`
	// Config is what the image says about running it.
	Config Config `json:"config"`
	// Size is what its layers take unpacked, in bytes.
	Size int64 `json:"size"`
	// Pulled is when it came into the cache.
	Pulled time.Time `json:"pulled"`
}

// Config is the part of an image's config a driver honours.
type Config struct {
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
}

// Progress is one step of a pull, handed to the caller's progress function.
type Progress struct {
	// Layer is the diff id of the layer the step is about; "" is the image.
	Layer string
	// Status is "resolving", "downloading", "unpacking", "cached" (a layer
	// already unpacked) or "done".
	Status string
	// Current and Total count bytes of the layer, when known.
	Current, Total int64
}
