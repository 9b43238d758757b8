package testenv

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// An engine without the image gets it, made from busybox-static, and a
// second call keeps it.
func TestEnsureBusyboxImage(t *testing.T) {
	RequireDocker(t)
	ref := fmt.Sprintf("corral-test/ensure-%d:1", os.Getpid())
	api, err := DockerClient()
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Cleanup(func() { _, _ = api.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true}) })
	for range 2 {
		if err := EnsureBusyboxImage(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	img, err := api.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if cmd := img.Config.Cmd; !slices.Equal(cmd, []string{"sh"}) {
		t.Fatalf("the image's command: %v", cmd)
	}
}
