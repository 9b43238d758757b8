package supervisor

import (
	"strings"
	"testing"
)

func TestResolveUser(t *testing.T) {
	passwd := []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1001:1002::/home/app:/bin/sh\nbad:x:-4:0::/:/bin/sh\n")
	for user, want := range map[string]int{"0": 1000, "0:0": 1000, "1000": 1000, "1000:1000": 1000, "app": 1001, "app:staff": 1001, "root": 1000} {
		got, err := ResolveUser(user, passwd)
		if err != nil || got != want {
			t.Errorf("ResolveUser(%q) = %d, %v; want %d", user, got, err, want)
		}
	}
	for user, why := range map[string]string{"": "names no user", ":0": "names no user", "ghost": "not in the image's /etc/passwd",
		"bad": "gives it uid", "70000": "outside", "-1": "outside"} {
		if _, err := ResolveUser(user, passwd); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ResolveUser(%q) = %v; want an error saying %q", user, err, why)
		}
	}
}
