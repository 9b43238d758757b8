package metrics

import (
	"math"
	"sort"

	dto "github.com/prometheus/client_model/go"
)

// Stats are what the gateway has done since it started, read back from
// its metrics, for the doctor's report and the console's charts.
type Stats struct {
	// Operations is how many journal entries settled.
	Operations int64
	// DriverCalls are the driver calls by kind, by kind's name.
	DriverCalls []CallStats
	// Egress is the egress decisions by verdict, every sandbox's summed.
	Egress map[string]int64
}

// CallStats are the driver calls of one kind.
type CallStats struct {
	Kind     string
	Count    int64
	P50, P95 float64 // seconds: the upper bounds of their buckets
}

// Read gathers Stats from the registry.
func Read() (Stats, error) {
	families, err := registry.Gather()
	if err != nil {
		return Stats{}, err
	}
	st := Stats{Egress: map[string]int64{}}
	for _, f := range families {
		switch f.GetName() {
		case "corral_operations_total":
			for _, m := range f.GetMetric() {
				st.Operations += int64(m.GetCounter().GetValue())
			}
		case "corral_egress_decisions_total":
			for _, m := range f.GetMetric() {
				st.Egress[label(m, "verdict")] += int64(m.GetCounter().GetValue())
			}
		case "corral_driver_call_seconds":
			for _, m := range f.GetMetric() {
				h := m.GetHistogram()
				st.DriverCalls = append(st.DriverCalls, CallStats{Kind: label(m, "kind"), Count: int64(h.GetSampleCount()),
					P50: quantile(h, 0.5), P95: quantile(h, 0.95)})
			}
		}
	}
	sort.Slice(st.DriverCalls, func(i, j int) bool { return st.DriverCalls[i].Kind < st.DriverCalls[j].Kind })
	return st, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// quantile is the upper bound of the bucket that holds the q-th of a
// histogram's samples (+Inf past its last bucket: the largest bound).
func quantile(h *dto.Histogram, q float64) float64 {
	want := uint64(math.Ceil(q * float64(h.GetSampleCount())))
	last := 0.0
	for _, b := range h.GetBucket() {
		last = b.GetUpperBound()
		if b.GetCumulativeCount() >= want {
			return last
		}
	}
	return last
}
