package caller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
)

func TestCallerTravelsInTheContext(t *testing.T) {
	if got := From(context.Background()); got.Name != "an unidentified caller" {
		t.Errorf("From a bare context: %q; want the unidentified caller", got.Name)
	}
	ctx := With(context.Background(), Local)
	if got := From(ctx); got != Local {
		t.Errorf("From a context with Local: %+v", got)
	}
}

func TestFromTLS(t *testing.T) {
	if _, ok := FromTLS(nil); ok {
		t.Error("FromTLS(nil) identified someone")
	}
	if _, ok := FromTLS(&tls.ConnectionState{}); ok {
		t.Error("FromTLS of a connection without a client certificate identified someone")
	}
	state := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: "alice"}}}}
	if c, ok := FromTLS(state); !ok || c.Name != "client certificate alice" {
		t.Errorf("FromTLS of alice's certificate: %+v, %v", c, ok)
	}
}
