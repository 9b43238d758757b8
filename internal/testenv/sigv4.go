package testenv

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// CheckSigV4 checks an AWS Signature Version 4 request's signature as a
// server would: the headers it names signed again with the real keys,
// the same time and scope.
func CheckSigV4(r *http.Request, keyID, key string) error {
	auth := r.Header.Get("Authorization")
	var scope []string
	var signed, signature string
	for _, part := range strings.Split(strings.TrimPrefix(auth, "AWS4-HMAC-SHA256 "), ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Credential":
			scope = strings.Split(v, "/")
		case "SignedHeaders":
			signed = v
		case "Signature":
			signature = v
		}
	}
	if len(scope) != 5 || scope[0] != keyID {
		return fmt.Errorf("credential %v, want key id %s", scope, keyID)
	}
	check := r.Clone(context.Background())
	check.Header = http.Header{}
	for _, h := range strings.Split(signed, ";") {
		if h != "host" && h != "content-length" {
			check.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	check.URL.Scheme, check.URL.Host = "https", r.Host
	when, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return err
	}
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: keyID, SecretAccessKey: key}, check,
		r.Header.Get("X-Amz-Content-Sha256"), scope[3], scope[2], when); err != nil {
		return err
	}
	if want := check.Header.Get("Authorization"); !strings.HasSuffix(want, "Signature="+signature) {
		return fmt.Errorf("signature %s; the real keys give %s", signature, want)
	}
	return nil
}
