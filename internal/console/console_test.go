package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/caller"
)

type oneToken struct{}

func (oneToken) Token(context.Context, string) (caller.Caller, error) {
	return caller.Caller{Name: "token t", Tenant: "default", Role: caller.Member}, nil
}

// clients make clients of a connection that is never dialled.
type clients struct{}

func (clients) Client(caller.Caller) (*client.Client, error) {
	conn, err := grpc.NewClient("passthrough:///nowhere", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return client.NewFromConn(conn, "nowhere"), nil
}

// However many times a token logs in, the console holds maxSessions
// sessions at most: the one that expires first goes.
func TestSessionsAreBounded(t *testing.T) {
	c := New(clients{}, oneToken{})
	defer c.Close()
	var first *http.Cookie
	for i := range maxSessions + 10 {
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"token": {"corral_x"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		c.ServeHTTP(w, req)
		if w.Code != http.StatusSeeOther || len(w.Result().Cookies()) != 1 {
			t.Fatalf("login %d: %d", i, w.Code)
		}
		if i == 0 {
			first = w.Result().Cookies()[0]
		}
	}
	if n := len(c.sessions); n != maxSessions {
		t.Errorf("%d sessions after %d logins; want %d", n, maxSessions+10, maxSessions)
	}
	req := httptest.NewRequest(http.MethodGet, "/api/session", nil)
	req.AddCookie(first)
	w := httptest.NewRecorder()
	c.ServeHTTP(w, req)
	if w.Code != http.StatusUnauthorized {
		t.Errorf("the first session after the bound: %d; want it ended (401)", w.Code)
	}
}
