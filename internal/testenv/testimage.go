package testenv

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/moby/moby/client"
)

// EnsureTestImage makes TestImage on the engine DOCKER_HOST names when it
// lacks it, as .ci/run does (EnsureBusyboxImage).
func EnsureTestImage(ctx context.Context) error { return EnsureBusyboxImage(ctx, TestImage) }

// EnsureBusyboxImage makes image ref, when the engine lacks it, from
// Debian's busybox-static: a link per applet and an /etc/passwd,
// `docker import`ed with CMD ["sh"]. It fails at once, saying what is
// missing, when no engine answers or the host has no static busybox.
func EnsureBusyboxImage(ctx context.Context, ref string) error {
	api, err := DockerClient()
	if err != nil {
		return err
	}
	defer api.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := api.Ping(pctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("no Docker engine answers (start dockerd, or set DOCKER_HOST): %w", err)
	}
	if _, err := api.ImageInspect(pctx, ref); err == nil {
		return nil
	}
	root, err := busyboxRoot()
	if err != nil {
		return err
	}
	res, err := api.ImageImport(ctx, client.ImageImportSource{Source: bytes.NewReader(root), SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: []string{`CMD ["sh"]`}})
	if err != nil {
		return fmt.Errorf("import %s: %w", ref, err)
	}
	defer res.Close()
	if _, err := io.Copy(io.Discard, res); err != nil {
		return fmt.Errorf("import %s: %w", ref, err)
	}
	_, err = api.ImageInspect(ctx, ref)
	return err
}

// busyboxRoot is the test image's root file system as a tar stream.
func busyboxRoot() ([]byte, error) {
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, fmt.Errorf("the test image %s needs Debian's busybox-static (apt-get install busybox-static): %w", TestImage, err)
	}
	applets, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("/bin/busybox --list (is it busybox-static?): %w", err)
	}
	entries := []tarEntry{dirEntry("bin", 0, 0o755), {name: "bin/busybox", mode: 0o755, body: busybox},
		dirEntry("tmp", 0, 0o1777), dirEntry("etc", 0, 0o755),
		{name: "etc/passwd", mode: 0o644, body: []byte("root:x:0:0:root:/root:/bin/sh\n")}}
	for _, applet := range strings.Fields(string(applets)) {
		if applet != "busybox" {
			entries = append(entries, tarEntry{name: "bin/" + applet, link: "busybox", typ: tar.TypeSymlink})
		}
	}
	return tarOf(entries)
}
