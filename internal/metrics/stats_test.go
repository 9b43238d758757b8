package metrics

import (
	"testing"
	"time"
)

// Read gives back what was recorded: driver calls' counts and the bucket
// bounds of their median and 95th percentile, egress decisions summed
// over sandboxes by verdict, and settled operations.
func TestReadGivesBackWhatWasRecorded(t *testing.T) {
	before, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		DriverCall("stats-test", 3*time.Millisecond)
	}
	DriverCall("stats-test", 100*time.Millisecond)
	EgressDecision("sb-1", "stats-test-denied")
	EgressDecision("sb-2", "stats-test-denied")
	EgressDecision("sb-2", "stats-test-denied")
	Settled("create", "succeeded")
	st, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	var call *CallStats
	for i := range st.DriverCalls {
		if st.DriverCalls[i].Kind == "stats-test" {
			call = &st.DriverCalls[i]
		}
	}
	if call == nil || call.Count != 11 || call.P50 != 0.004 || call.P95 != 0.128 {
		t.Errorf("driver calls: %+v; want 11, p50 ≤ 0.004 s, p95 ≤ 0.128 s", call)
	}
	if st.Egress["stats-test-denied"] != 3 {
		t.Errorf("egress decisions: %v; want 3 denied", st.Egress)
	}
	if st.Operations != before.Operations+1 {
		t.Errorf("operations: %d, then %d; want one more", before.Operations, st.Operations)
	}
}
