package caller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"testing"
)

func TestCallerTravelsInTheContext(t *testing.T) {
	if got := From(context.Background()); got.Name != "the gateway" || Identified(context.Background()) {
		t.Errorf("From a bare context: %+v; want the gateway itself, not identified", got)
	}
	ctx := With(context.Background(), Local)
	if got := From(ctx); got != Local || !Identified(ctx) {
		t.Errorf("From a context with Local: %+v", got)
	}
}

func cert(cn string, uris ...string) *x509.Certificate {
	c := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			panic(err)
		}
		c.URIs = append(c.URIs, parsed)
	}
	return c
}

func TestACertificateNamesItsTenantAndRole(t *testing.T) {
	cases := []struct {
		cert         *x509.Certificate
		want         Caller
		legacy, fail bool
	}{
		{cert: cert("alice", CertificateURI("acme", Member).String()), want: Caller{Name: "client certificate alice", Tenant: "acme", Role: Member}},
		{cert: cert("root", "corral:ops/admin"), want: Caller{Name: "client certificate root", Tenant: "ops", Role: Admin, Every: true}},
		{cert: cert("old"), want: Caller{Name: "client certificate old", Tenant: DefaultTenant, Role: Admin, Every: true}, legacy: true},
		{cert: cert("web", "https://example.test/x"), want: Caller{Name: "client certificate web", Tenant: DefaultTenant, Role: Admin, Every: true}, legacy: true},
		{cert: cert("two", "corral:a/viewer", "corral:b/admin"), fail: true},
		{cert: cert("bad", "corral:acme/owner"), fail: true},
		{cert: cert("bad", "corral:acme"), fail: true},
		{cert: cert("bad", "corral:/admin"), fail: true},
	}
	for _, c := range cases {
		got, legacy, err := FromCertificate(c.cert)
		if c.fail {
			if err == nil {
				t.Errorf("%v: accepted as %+v; want refused", c.cert.URIs, got)
			}
			continue
		}
		if err != nil || got != c.want || legacy != c.legacy {
			t.Errorf("%s %v: %+v legacy=%v err=%v; want %+v legacy=%v", c.cert.Subject.CommonName, c.cert.URIs, got, legacy, err, c.want, c.legacy)
		}
	}
}

func TestFromTLS(t *testing.T) {
	if _, ok, err := FromTLS(nil); ok || err != nil {
		t.Error("FromTLS(nil) identified someone")
	}
	if _, ok, _ := FromTLS(&tls.ConnectionState{}); ok {
		t.Error("FromTLS of a connection without a client certificate identified someone")
	}
	state := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert("alice", "corral:acme/viewer")}}
	if c, ok, err := FromTLS(state); !ok || err != nil || c.Name != "client certificate alice" || c.Role != Viewer {
		t.Errorf("FromTLS of alice's certificate: %+v, %v, %v", c, ok, err)
	}
}

func TestRolesAndTenants(t *testing.T) {
	if !Member.Allows(Viewer) || Viewer.Allows(Member) || !Admin.Allows(Member) || Role("").Allows(Viewer) {
		t.Error("the roles' order is wrong")
	}
	if _, err := ParseRole("owner"); err == nil {
		t.Error("ParseRole(owner) accepted")
	}
	m := Caller{Name: "m", Tenant: "a", Role: Member}
	if _, err := m.InTenant("b"); err == nil {
		t.Error("a member of a acted in b")
	}
	if got, err := m.InTenant("a"); err != nil || got != m {
		t.Errorf("a member of a naming a: %+v, %v", got, err)
	}
	a := Caller{Name: "root", Tenant: DefaultTenant, Role: Admin, Every: true}
	got, err := a.InTenant("b")
	if err != nil || got.Tenant != "b" || got.Every || got.Sees("a") || !got.Sees("b") {
		t.Errorf("an admin naming b: %+v, %v", got, err)
	}
	if !a.Sees("anything") || a.Scope() != "" || m.Scope() != "a" {
		t.Error("Sees or Scope is wrong")
	}
}
