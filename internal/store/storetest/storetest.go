// Package storetest is the suite every store.Store passes: records and
// their journal, tenants and quotas, tokens, pools and claims, exposed
// ports, secrets, ledgers and snapshots, through the interface alone. A
// store's own tests call Run with a way to open it.
package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/store"
)

// Opener opens the store named name of test t: made empty on its first
// open, the same data on a later one (the suite closes the earlier one
// first). The store is closed when t ends.
type Opener func(t *testing.T, name string) store.Store

// Run runs the suite, each test as a subtest on stores of its own.
func Run(t *testing.T, open Opener) {
	for _, tc := range []struct {
		name string
		run  func(*testing.T, Opener)
	}{
		{"CreateSandboxNameTaken", testCreateSandboxNameTaken},
		{"CreateSandboxRequestIDReplay", testCreateSandboxRequestIDReplay},
		{"CreateSandboxRequestIDOtherName", testCreateSandboxRequestIDOtherName},
		{"MutateSupersedesPendingRequest", testMutateSupersedesPendingRequest},
		{"MutateCallbackErrorRollsBack", testMutateCallbackErrorRollsBack},
		{"MutateStoresTheSpec", testMutateStoresTheSpec},
		{"MutateFailedJournalWriteRollsBack", testMutateFailedJournalWriteRollsBack},
		{"MutateExitCodeAndRestarts", testMutateExitCodeAndRestarts},
		{"PauseMemoryKept", testPauseMemoryKept},
		{"MutateMissing", testMutateMissing},
		{"MutateNamed", testMutateNamed},
		{"MutateSettleRequests", testMutateSettleRequests},
		{"PutOperationUpdates", testPutOperationUpdates},
		{"PutOperationNeedsSandbox", testPutOperationNeedsSandbox},
		{"SettlePendingByOwner", testSettlePendingByOwner},
		{"DeleteSandbox", testDeleteSandbox},
		{"ListSandboxesLastRequest", testListSandboxesLastRequest},
		{"IdentityIsMadeOnceAndKept", testIdentityIsMadeOnceAndKept},
		{"NamesAreUniqueWithinATenant", testNamesAreUniqueWithinATenant},
		{"QuotaHoldsUnderConcurrentCreates", testQuotaHoldsUnderConcurrentCreates},
		{"TokensAndTenantDeletion", testTokensAndTenantDeletion},
		{"Ledger", testLedger},
		{"PoolsSurviveReopen", testPoolsSurviveReopen},
		{"ClaimSandbox", testClaimSandbox},
		{"ExposedPorts", testExposedPorts},
		{"Secrets", testSecrets},
		{"SnapshotsAndTheirQuota", testSnapshotsAndTheirQuota},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, open) })
	}
}

var stores atomic.Int64

// fresh opens a store no other call opened.
func fresh(t *testing.T, open Opener) store.Store {
	t.Helper()
	return open(t, fmt.Sprintf("s%d", stores.Add(1)))
}

// Ctx is a test's context for store calls, bounded.
func Ctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
