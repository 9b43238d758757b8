package driver

import (
	"slices"
	"testing"
)

func TestWithEnvReplacesKeys(t *testing.T) {
	got := WithEnv([]string{"PATH=/bin", "HTTP_PROXY=http://image", "SSL_CERT_FILE=/image.pem", "A=1"},
		[]string{"HTTP_PROXY=http://corral", "SSL_CERT_FILE=/corral.pem"})
	want := []string{"PATH=/bin", "A=1", "HTTP_PROXY=http://corral", "SSL_CERT_FILE=/corral.pem"}
	if !slices.Equal(got, want) {
		t.Fatalf("WithEnv: %q, want %q", got, want)
	}
}
