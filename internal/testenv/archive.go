package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// SavedTestImage is `docker save` of TestImage, in a file of the test's.
func SavedTestImage(t testing.TB) string {
	t.Helper()
	RequireDocker(t)
	api, err := DockerClient()
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	res, err := api.ImageSave(context.Background(), []string{TestImage})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	path := filepath.Join(t.TempDir(), "saved.tar")
	f, err := os.Create(path)
	if err == nil {
		_, err = io.Copy(f, res)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// UniqueTestImage is TestImage (from SavedTestImage's archive) with a
// label of its own, so an image id that no other test's container uses,
// and, when extra > 0, a random layer of that many bytes on top (which no
// engine has yet).
func UniqueTestImage(t testing.TB, saved string, extra int64) v1.Image {
	t.Helper()
	img, err := tarball.ImageFromPath(saved, nil)
	if err != nil {
		t.Fatal(err)
	}
	if extra > 0 {
		layer, err := random.Layer(extra, types.DockerLayer)
		if err == nil {
			img, err = mutate.AppendLayers(img, layer)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	cfg := cf.Config
	cfg.Labels = map[string]string{"corral.test": hex.EncodeToString(id[:])}
	if img, err = mutate.Config(img, cfg); err != nil {
		t.Fatal(err)
	}
	return img
}

// WriteArchive writes img as a docker-archive file and returns its path.
func WriteArchive(t testing.TB, img v1.Image) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := tarball.WriteToFile(path, name.MustParseReference("corral-test/unique:1"), img); err != nil {
		t.Fatal(err)
	}
	return path
}

// WriteLayout writes img as an OCI image layout and returns its directory.
func WriteLayout(t testing.TB, img v1.Image) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err == nil {
		err = p.AppendImage(img)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// Registry starts an empty registry of the test's on 127.0.0.1 and returns
// its host:port, so that a pull of a missing image fails here, not on the
// internet.
func Registry(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// ServeImage serves img from a registry of the test's (go-containerregistry's,
// on 127.0.0.1, which Docker reaches over plain HTTP) as repo:tag, and
// returns that reference, registry host included.
func ServeImage(t testing.TB, repoTag string, img v1.Image) string {
	t.Helper()
	ref := Registry(t) + "/" + repoTag
	push, err := name.ParseReference(ref, name.Insecure)
	if err == nil {
		err = remote.Write(push, img)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ref
}
