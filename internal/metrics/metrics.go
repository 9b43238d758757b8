// Package metrics holds the gateway's Prometheus metrics, served on the
// opt-in metrics listen address at /metrics.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var (
	registry = prometheus.NewRegistry()

	operations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "corral_operations_total",
		Help: "Journaled operations by kind (a request, or a driver.* call) and the state they settled in.",
	}, []string{"kind", "state"})
	callSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "corral_driver_call_seconds",
		Help:    "Duration of driver calls by kind.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	}, []string{"kind"})
	retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "corral_retries_total",
		Help: "Failed steps that the reconciler retries with backoff, by the call that failed.",
	}, []string{"kind"})
	interrupted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "corral_interrupted_operations_total",
		Help: "Journal entries settled as interrupted (their gateway instance ended, or the shutdown budget ran out).",
	})
	reconcileLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "corral_reconcile_lag_seconds",
		Help:    "Time from a request to the sandbox reaching its intent.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
	})
	storeWrites = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "corral_store_writes_total",
		Help: "Write transactions the store ran in a commit, each answered with its own outcome.",
	})
	storeCommits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "corral_store_commits_total",
		Help: "Commits (each one fsync) of the store; writes_total / commits_total is the group commit's batching ratio.",
	})
	recovery = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "corral_recovery_seconds",
		Help: "Time from the start of recovery until every sandbox had been compared with the driver once.",
	})
	egress = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "corral_egress_decisions_total",
		Help: "Connections and requests the egress proxy decided, by sandbox and verdict (allowed, denied, audited).",
	}, []string{"sandbox", "verdict"})
	credentialUses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "corral_credential_uses_total",
		Help: "Credentials the egress proxy injected, and requests it refused for carrying a placeholder where the value may not go, by secret and verdict (injected, refused).",
	}, []string{"secret", "verdict"})
)

func init() {
	registry.MustRegister(operations, callSeconds, retries, interrupted, reconcileLag, recovery, egress, credentialUses, storeWrites, storeCommits,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// EgressDecision counts one decision of a sandbox's egress proxy.
func EgressDecision(sandbox, verdict string) { egress.WithLabelValues(sandbox, verdict).Inc() }

// CredentialUse counts one injection or refusal of a secret.
func CredentialUse(secret, verdict string) { credentialUses.WithLabelValues(secret, verdict).Inc() }

// Settled counts a journal entry that settled in state.
func Settled(kind, state string) {
	operations.WithLabelValues(kind, state).Inc()
	if state == "interrupted" {
		interrupted.Inc()
	}
}

// DriverCall records how long a driver call took.
func DriverCall(kind string, d time.Duration) { callSeconds.WithLabelValues(kind).Observe(d.Seconds()) }

// Retry counts a failed step that will be retried.
func Retry(kind string) { retries.WithLabelValues(kind).Inc() }

// Interrupted counts n entries settled as interrupted in bulk.
func Interrupted(n int) {
	interrupted.Add(float64(n))
	operations.WithLabelValues("any", "interrupted").Add(float64(n))
}

// Converged records the lag from a request to its intent being reached.
func Converged(kind string, since time.Time) {
	reconcileLag.Observe(time.Since(since).Seconds())
	operations.WithLabelValues(kind, "succeeded").Inc()
}

// Recovered records how long recovery took to compare every sandbox with
// the driver.
func Recovered(took time.Duration) { recovery.Set(took.Seconds()) }

// StoreCommitted counts one commit of the store that carried writes
// write transactions.
func StoreCommitted(writes int) {
	storeCommits.Inc()
	storeWrites.Add(float64(writes))
}

// Handler serves the metrics in the Prometheus text format.
func Handler() http.Handler { return promhttp.HandlerFor(registry, promhttp.HandlerOpts{}) }
