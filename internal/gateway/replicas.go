package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/service"
	"github.com/corral-sandbox/corral/internal/store"
	"github.com/corral-sandbox/corral/internal/store/postgres"
	"github.com/corral-sandbox/corral/internal/store/stores"
	"github.com/corral-sandbox/corral/internal/tenants"
)

// owned is a store made this gateway's.
type owned struct {
	store.Store
	// epoch is the lease's fencing token (0 on SQLite, whose home's lock
	// is its only holder's).
	epoch int64
	// me is this gateway as it says of itself among the replicas.
	me            sandbox.Replica
	ttl           time.Duration
	leave, unlock func()
}

// Close closes the store, leaving the replicas first and letting go of
// the home's lock last.
func (o *owned) Close() error {
	if o.leave != nil {
		o.leave()
	}
	err := o.Store.Close()
	o.unlock()
	return err
}

// errStandbyEnded is openStore's answer when a signal ended a replica in
// standby: it held nothing, and nothing is to be settled.
var errStandbyEnded = errors.New("stopped in standby")

// openStore opens the gateway's store and makes it this gateway's. A
// SQLite store is its home's: the home's lock holds it. A PostgreSQL store
// can be shared by replicas on one host and one home: one holds its lease
// at a time and owns every sandbox; the others wait in standby (serving
// the API on their TLS listener through the leader, serveStandby), and the
// first to get the lease then takes the home's lock too, which the last
// leader's process lets go of only when it has ended. So no two replicas
// ever drive the compute at once: the lease fences the store's writes, the
// home's lock the processes. ctx ends the wait (errStandbyEnded).
func openStore(ctx context.Context, opts Options, instance string, log *slog.Logger) (*owned, error) {
	cfg := opts.Config
	if !stores.IsPostgres(cfg.StoreURL) {
		lock, err := lockHome(opts.Home)
		if err != nil {
			return nil, err
		}
		st, err := stores.Open(context.Background(), cfg.StoreURL, opts.Home)
		if err != nil {
			lock.release()
			return nil, err
		}
		return &owned{Store: st, me: replicaOf(opts, instance), ttl: cfg.Replicas.LeaseTTL, unlock: lock.release}, nil
	}
	st, err := postgres.Open(context.Background(), cfg.StoreURL)
	if err != nil {
		return nil, err
	}
	me := replicaOf(opts, instance)
	leave, err := st.Join(context.Background(), me)
	if err != nil {
		st.Close()
		return nil, err
	}
	if unleased {
		return &owned{Store: st, me: me, ttl: cfg.Replicas.LeaseTTL, leave: leave, unlock: func() {}}, nil
	}
	// A standby that cannot serve its address stops, as a gateway that
	// cannot does.
	var (
		standing *standby
		standErr error
	)
	holdCtx, cancelHold := context.WithCancel(ctx)
	defer cancelHold()
	epoch, err := st.Hold(holdCtx, postgres.Lease{Me: me, TTL: cfg.Replicas.LeaseTTL, Wait: true, Waiting: func(leader sandbox.Replica) {
		log.Info("standby: another gateway holds the store (one that has just died lets go within the lease's TTL); this one takes over when it goes",
			"leader", leader.ID, "leader_pid", leader.PID)
		if cfg.Listen == "" {
			return
		}
		if standing, standErr = serveStandby(cfg, opts.Home, instance, service.Gate{Tenants: tenants.New(st, nil)}, log); standErr != nil {
			cancelHold()
		}
	}}, func(err error) {
		log.Error("lost the hold of the store: exiting, so that no two gateways act on its sandboxes", "err", err)
		os.Exit(1)
	})
	if standing != nil {
		standing.stop()
	}
	if err == nil {
		var lock *homeLock
		if lock, err = waitHomeLock(ctx, opts.Home, log); err == nil {
			return &owned{Store: st, epoch: epoch, me: me, ttl: cfg.Replicas.LeaseTTL, leave: leave, unlock: lock.release}, nil
		}
	}
	leave()
	st.Close()
	switch {
	case standErr != nil:
		return nil, fmt.Errorf("standby: %w", standErr)
	case ctx.Err() != nil:
		return nil, errStandbyEnded
	}
	return nil, err
}

// replicaOf is the gateway of instance as it says of itself.
func replicaOf(opts Options, instance string) sandbox.Replica {
	home, err := filepath.Abs(opts.Home)
	if err != nil {
		home = opts.Home
	}
	host, _ := os.Hostname()
	return sandbox.Replica{ID: instance, PID: os.Getpid(), Host: host, Home: home, Listen: opts.Config.Listen, StartedAt: time.Now()}
}

// Replicas lists the store's gateways for the API core: the replicas of
// a shared store as they said of themselves, else this gateway alone; the
// leader owns every sandbox.
func (o *owned) Replicas(ctx context.Context) ([]sandbox.Replica, time.Duration, error) {
	var list []sandbox.Replica
	if shared, ok := o.Store.(interface {
		Replicas(context.Context) ([]sandbox.Replica, error)
	}); ok {
		var err error
		if list, err = shared.Replicas(ctx); err != nil {
			return nil, 0, err
		}
	} else {
		me := o.me
		me.SeenAt, me.Leader = time.Now(), true
		list = []sandbox.Replica{me}
	}
	records, err := o.ListSandboxes(ctx, "")
	if err != nil {
		return nil, 0, err
	}
	for i := range list {
		if list[i].Leader {
			list[i].Sandboxes = len(records)
		}
	}
	return list, o.ttl, nil
}

// waitHomeLock takes the home's lock, waiting for a last leader that has
// lost the lease (and exits at once) to end.
func waitHomeLock(ctx context.Context, home string, log *slog.Logger) (*homeLock, error) {
	for told := false; ; told = true {
		lock, err := lockHome(home)
		if err == nil {
			return lock, nil
		}
		if !told {
			log.Info("holds the store's lease; waiting for the last leader's process to end", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
