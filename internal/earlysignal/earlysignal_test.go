package earlysignal

import "testing"

func TestRunsGateway(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"gateway"}, true},
		{[]string{"--home", "/x", "gateway", "--driver", "fake"}, true},
		{[]string{"--home=/x", "gateway"}, true},
		{[]string{"sandbox", "list"}, false},
		{[]string{"--home", "gateway", "sandbox"}, false}, // a home named gateway
		{[]string{"sandbox", "create", "--name", "gateway"}, false},
		{nil, false},
		{[]string{"gateway", "doctor"}, false},
		{[]string{"--home", "/x", "gateway", "client-cert", "alice"}, false},
	} {
		if got := runsGateway(tc.args); got != tc.want {
			t.Errorf("runsGateway(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}
