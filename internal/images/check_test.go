package images

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

func TestCheckNamesWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	archive := filepath.Join(dir, "image.tar")
	if err := os.WriteFile(archive, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{"python:3.12", "127.0.0.1:5000/corral/probe:1", "docker-archive:" + archive, "oci:" + dir, "oci:" + dir + ":v1"} {
		if err := Check(ok); err != nil {
			t.Errorf("Check(%q) = %v", ok, err)
		}
	}
	for ref, why := range map[string]string{
		"Not A Ref":                   "not a valid reference",
		"docker-archive:image.tar":    "needs an absolute path",
		"oci:" + dir + "/missing":     "does not exist",
		"docker-archive:/nonexistent": "does not exist",
	} {
		err := Check(ref)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), ref) {
			t.Errorf("Check(%q) = %v; want an invalid argument naming it and saying %q", ref, err, why)
		}
	}
}
