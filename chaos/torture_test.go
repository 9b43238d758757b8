package chaos

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/store/sqlite"
	"github.com/corral-sandbox/corral/internal/store/stores"
	"github.com/corral-sandbox/corral/internal/testbug"
	"github.com/corral-sandbox/corral/internal/testenv"
	"github.com/corral-sandbox/corral/internal/tlsauth"
)

var (
	seedFlag   = flag.Int64("seed", -1, "run only this seed")
	seedsFlag  = flag.Int("seeds", 3, "how many seeds to run (from 1)")
	driverFlag = flag.String("driver", "fake", "the driver to torture: fake, docker, native or kubernetes (on the cluster of $CORRAL_TEST_KUBECONFIG)")
	killsFlag  = flag.Int("kills", 12, "kill points per seed")
	isolation  = flag.String("isolation", "", "the isolation tier of the sandboxes (docker): namespaces or gvisor")
	storeFlag  = flag.String("store", "sqlite", "the gateway's store: sqlite (in its home) or postgres (a database of $CORRAL_TEST_POSTGRES's server)")
	replicasF  = flag.Int("replicas", 1, "gateways at once on one home and one PostgreSQL store (more than 1 implies -store postgres): random ones are killed and started again, requests go to any")
)

var bin string

func TestMain(m *testing.M) {
	flag.Parse()
	testenv.MainWithCorral(m, &bin)
}

func TestTorture(t *testing.T) {
	seeds := []int64{}
	if *seedFlag >= 0 {
		seeds = append(seeds, *seedFlag)
	} else {
		for s := int64(1); s <= int64(*seedsFlag); s++ {
			seeds = append(seeds, s)
		}
	}
	total, created := 0, 0
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			switch *driverFlag {
			case "docker":
				testenv.RequireDocker(t)
			case "native":
				testenv.RequireRoot(t)
			}
			r := newRunOn(t, seed, *driverFlag, *isolation)
			if *storeFlag == "postgres" || *replicasF > 1 {
				r.onPostgres()
			}
			if *replicasF > 1 {
				r.asReplicas(*replicasF)
			}
			r.torture(*killsFlag)
			total += r.kills
			violations := r.check()
			created += len(r.created)
			t.Logf("seed %d: %d kill points, %d sandboxes created, %d at the final check", seed, r.kills, len(r.created), r.checked)
			r.mu.Lock()
			logs := r.log.String()
			r.mu.Unlock()
			t.Logf("seed %d: %d snapshots taken, %d cut short and removed, %d sandboxes resumed after one, %d created from one", seed,
				strings.Count(logs, `msg="snapshot taken"`), strings.Count(logs, `msg="snapshot cut short removed"`),
				strings.Count(logs, `msg="sandbox resumed after a snapshot cut short"`), strings.Count(logs, `msg="sandbox created"`)-strings.Count(logs, `from_snapshot=""`))
			if r.preInit > 0 {
				t.Logf("seed %d: %d SIGTERMs arrived before the gateway took its home lock", seed, r.preInit)
			}
			for _, v := range violations {
				t.Errorf("seed %d: invariant violated: %s (replay: go test ./chaos -run Torture -seed %d -v)", seed, v, seed)
			}
		})
	}
	t.Logf("%d seeds, %d kill points", len(seeds), total)
	if created == 0 {
		t.Errorf("no create was acknowledged in %d kill points: the run tested nothing", total)
	}
}

// TestTortureNativeSmoke is the bounded native run of every `go test`
// (the full one is TestTorture with -driver native).
func TestTortureNativeSmoke(t *testing.T) {
	if *driverFlag != "fake" || *seedFlag >= 0 {
		t.Skip("TestTorture runs the chosen driver")
	}
	testenv.RequireRoot(t)
	smoke(t, "-driver native", func(seed int64) *run { return newRunOn(t, seed, "native", "") })
}

// TestTorturePostgresSmoke is the bounded run on a PostgreSQL store of
// every `go test` (the full one is TestTorture with -store postgres).
func TestTorturePostgresSmoke(t *testing.T) {
	if *driverFlag != "fake" || *seedFlag >= 0 || *storeFlag != "sqlite" {
		t.Skip("TestTorture runs the chosen driver and store")
	}
	testenv.RequirePostgres(t)
	smoke(t, "-store postgres", func(seed int64) *run {
		r := newRun(t, seed)
		r.onPostgres()
		return r
	})
}

// TestTortureReplicasSmoke is the bounded run of three replicas on one
// PostgreSQL store of every `go test` (the full one is TestTorture with
// -replicas 3).
func TestTortureReplicasSmoke(t *testing.T) {
	if *driverFlag != "fake" || *seedFlag >= 0 || *storeFlag != "sqlite" || *replicasF > 1 {
		t.Skip("TestTorture runs the chosen driver, store and replicas")
	}
	testenv.RequirePostgres(t)
	smoke(t, "-replicas 3", func(seed int64) *run {
		r := newRun(t, seed)
		r.onPostgres()
		r.asReplicas(3)
		return r
	})
}

// smoke tortures the runs newRun makes for seeds 1 and 2 at 8 kill points
// each; flags replay a failure under TestTorture.
func smoke(t *testing.T, flags string, newRun func(seed int64) *run) {
	created := 0
	for seed := int64(1); seed <= 2; seed++ {
		r := newRun(seed)
		r.torture(8)
		for _, v := range r.check() {
			t.Errorf("seed %d: invariant violated: %s (replay: go test ./chaos -run 'TestTorture$' %s -seed %d -v)", seed, v, flags, seed)
		}
		created += len(r.created)
	}
	if created == 0 {
		t.Error("no create was acknowledged: the run tested nothing")
	}
}

// TestTortureKubernetesSmoke is the bounded run on the kubernetes driver,
// on the cluster of testenv.KubeconfigEnv (.ci/run serves one with
// test/kubernetes's cmd/cluster); the full one is TestTorture with
// -driver kubernetes.
func TestTortureKubernetesSmoke(t *testing.T) {
	if *driverFlag != "fake" || *seedFlag >= 0 {
		t.Skip("TestTorture runs the chosen driver")
	}
	testenv.RequireKubernetes(t)
	smoke(t, "-driver kubernetes", func(seed int64) *run { return newRunOn(t, seed, "kubernetes", "") })
}

// TestTortureDockerGVisorSmoke is the bounded run on Docker's gVisor tier
// of every `go test` (the full one is TestTorture with -driver docker
// -isolation gvisor).
func TestTortureDockerGVisorSmoke(t *testing.T) {
	if *driverFlag != "fake" || *seedFlag >= 0 {
		t.Skip("TestTorture runs the chosen driver")
	}
	testenv.RequireDocker(t)
	r := newRunOn(t, 1, "docker", policy.IsolationGVisor)
	r.torture(8)
	violations := r.check()
	t.Logf("%d kill points, %d sandboxes created, %d at the final check", r.kills, len(r.created), r.checked)
	for _, v := range violations {
		t.Errorf("invariant violated: %s (replay: go test ./chaos -run 'TestTorture$' -driver docker -isolation gvisor -seed 1 -v)", v)
	}
	if len(r.created) == 0 {
		t.Error("no create was acknowledged: the run tested nothing")
	}
}

// run is one seeded torture run.
type run struct {
	t     *testing.T
	seed  int64
	rng   *rand.Rand
	home  string
	names []string
	kills int
	log   bytes.Buffer // every gateway's output, shown on failure

	env      []string // extra environment of the gateway children
	label    string   // the gateway's sandbox label
	backend  backend
	storeURL string // the gateway's --store; "": SQLite in its home
	// addrs are the TLS addresses of the replicas (asReplicas), one per
	// slot; certs holds an admin's certificate to call them.
	addrs []string
	certs string

	mu             sync.Mutex
	created        map[string]bool     // acknowledged creates
	deleteAsked    map[string]bool     // deletes sent, answered or not
	deletes        map[string]*deletes // what is known of each name's deletes
	lastSigterm    []violation         // SIGTERM'd gateways that did not exit 0
	preInit        int                 // SIGTERMs that came before any corral code ran
	checked        int                 // records the final check found
	clientFailures []violation         // answers no request should get
}

// kind is which invariant a violation breaks, so that a test can require
// the one a failure causes.
type kind string

const (
	killedBySIGTERM     kind = "killed-by-sigterm"     // a SIGTERM killed a gateway that held its home lock
	badExit             kind = "bad-exit"              // a SIGTERM'd gateway exited non-zero otherwise
	noExit              kind = "no-exit"               // a SIGTERM'd gateway did not exit within budget
	shutdownLeftOwn     kind = "shutdown-left-own"     // a graceful shutdown left its own journal entries pending
	shutdownLeftDead    kind = "shutdown-left-dead"    // a graceful shutdown left dead instances' entries pending
	stillPending        kind = "still-pending"         // a request refused: "previous driver operation is still pending"
	refused             kind = "refused"               // another refusal no request should get
	requestFailed       kind = "request-failed"        // an error no request should get
	notConverged        kind = "not-converged"         // a record did not reach its intent
	lost                kind = "lost"                  // a created sandbox nobody deleted is gone
	driverDisagrees     kind = "driver-disagrees"      // the driver's view is not the record's
	orphan              kind = "orphan"                // compute without a record outlived the grace
	pendingPastDeadline kind = "pending-past-deadline" // a journal entry pending past its deadline
	pendingForGone      kind = "pending-for-gone"      // a journal entry pending for an instance that is gone
	journalUnreadable   kind = "journal-unreadable"    // the journal could not be read
	undeletable         kind = "undeletable"           // a sandbox could not be deleted
	storeDamaged        kind = "store-damaged"         // the store is damaged
	halfSnapshot        kind = "half-snapshot"         // a snapshot listed but not whole, or left half taken
	twoDrivers          kind = "two-drivers"           // two gateways called the driver for one sandbox at once
)

// violation is one invariant broken.
type violation struct {
	kind kind
	msg  string
}

func (v violation) String() string { return v.msg + " [" + string(v.kind) + "]" }

func violated(k kind, format string, args ...any) violation {
	return violation{kind: k, msg: fmt.Sprintf(format, args...)}
}

// refusal classifies an error that no request should get.
func refusal(err error, format string, args ...any) violation {
	msg := fmt.Sprintf(format, args...)
	switch {
	case status.Code(err) == codes.FailedPrecondition && strings.Contains(status.Convert(err).Message(), "previous driver operation is still pending"):
		return violation{kind: stillPending, msg: msg}
	case status.Code(err) == codes.FailedPrecondition:
		return violation{kind: refused, msg: msg}
	}
	return violation{kind: requestFailed, msg: msg}
}

func newRun(t *testing.T, seed int64) *run {
	return newRunOn(t, seed, "fake", "")
}

func newRunOn(t *testing.T, seed int64, driverName, isolation string) *run {
	r := &run{t: t, seed: seed, rng: rand.New(rand.NewPCG(uint64(seed), 42)), home: t.TempDir(),
		created: map[string]bool{}, deleteAsked: map[string]bool{}, deletes: map[string]*deletes{}}
	r.label = fmt.Sprintf("corral.chaos.%d.%d", seed, time.Now().UnixNano())
	switch driverName {
	case "docker":
		r.backend = newDockerBackend(t, r.label, isolation)
		testenv.UnmountUnder(t, r.home) // the run directories of sandboxes a run leaves

	case "native":
		r.backend = &nativeBackend{t: t, dir: filepath.Join(r.home, "native"), label: r.label}
	case "kubernetes":
		r.backend = newKubeBackend(t, r.label)
	default:
		r.backend = &fakeBackend{t: t, dir: filepath.Join(r.home, "fake"), label: r.label}
	}
	for i := range 6 {
		r.names = append(r.names, fmt.Sprintf("s%d", i))
	}
	r.names = append(r.names, "fork-1", "fork-2")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway logs:\n%s", r.log.String())
		}
	})
	return r
}

// onPostgres makes the run's gateways keep their store in a database of
// their own on the PostgreSQL server of the tests.
func (r *run) onPostgres() {
	r.storeURL = testenv.PostgresDatabase(r.t, fmt.Sprintf("torture-%d", r.seed))
}

// asReplicas makes the run's gateways n replicas on its home and store,
// each with a TLS address of its own, which the clients call at random.
func (r *run) asReplicas(n int) {
	r.certs = r.t.TempDir()
	out, err := exec.Command(bin, "--home", r.home, "gateway", "client-cert", "chaos", "--role", "admin", "--out", r.certs).CombinedOutput()
	if err != nil {
		r.t.Fatalf("client-cert: %v\n%s", err, out)
	}
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			r.t.Fatal(err)
		}
		r.addrs = append(r.addrs, lis.Addr().String())
		lis.Close()
	}
}

// gateway is one gateway child process.
type gateway struct {
	cmd  *exec.Cmd
	done chan struct{}
	out  *testenv.SyncBuffer
}

func (r *run) start() *gateway { return r.startAt("") }

// startAt starts a gateway that also listens on addr, when it is not "".
func (r *run) startAt(addr string) *gateway {
	args := append([]string{"--home", r.home, "gateway", "--sandbox-label", r.label,
		"--shutdown-timeout", "1s", "--provisioning-timeout", "2s", "--stop-timeout", "1s",
		"--resync-interval", "200ms", "--orphan-grace", "300ms", "--store", r.storeURL}, r.backend.args()...)
	if addr != "" {
		args = append(args, "--listen", addr)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), r.env...)
	g := &gateway{cmd: cmd, done: make(chan struct{}), out: &testenv.SyncBuffer{}}
	cmd.Stdout, cmd.Stderr = g.out, g.out
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() {
		cmd.Wait()
		r.mu.Lock()
		r.log.WriteString(g.out.String())
		r.mu.Unlock()
		close(g.done)
	}()
	return g
}

// api is a gateway's sandbox and snapshot services on one connection.
type api struct {
	corralv1.SandboxServiceClient
	snapshots corralv1.SnapshotServiceClient
}

func (r *run) client() (api, func()) {
	// Redial within milliseconds: gRPC's default backoff after a failed
	// dial (1 s, growing) outlasts a whole kill point, so a client that met
	// a gateway down would not reach the next one at all.
	reconnect := grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.6, MaxDelay: 50 * time.Millisecond}, MinConnectTimeout: time.Second}
	conn, err := grpc.NewClient("unix://"+filepath.Join(r.home, "corral.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithConnectParams(reconnect))
	if err != nil {
		r.t.Fatal(err)
	}
	return api{corralv1.NewSandboxServiceClient(conn), corralv1.NewSnapshotServiceClient(conn)}, func() { conn.Close() }
}

// replicaClients are clients of every replica's TLS address, or the
// home's socket's client when the run has no replicas.
func (r *run) replicaClients() ([]api, func()) {
	if len(r.addrs) == 0 {
		c, closeConn := r.client()
		return []api{c}, closeConn
	}
	cfg, err := tlsauth.ClientConfig(filepath.Join(r.certs, "ca.crt"), filepath.Join(r.certs, "chaos.crt"), filepath.Join(r.certs, "chaos.key"))
	if err != nil {
		r.t.Fatal(err)
	}
	reconnect := grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.6, MaxDelay: 50 * time.Millisecond}, MinConnectTimeout: time.Second}
	var (
		cs    []api
		conns []*grpc.ClientConn
	)
	for _, addr := range r.addrs {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)), grpc.WithConnectParams(reconnect))
		if err != nil {
			r.t.Fatal(err)
		}
		conns = append(conns, conn)
		cs = append(cs, api{corralv1.NewSandboxServiceClient(conn), corralv1.NewSnapshotServiceClient(conn)})
	}
	return cs, func() {
		for _, c := range conns {
			c.Close()
		}
	}
}

// clients sends random requests until stop is closed; some give up early.
func (r *run) clients(stop <-chan struct{}, seed uint64) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		go func() {
			defer wg.Done()
			cs, closeConns := r.replicaClients()
			defer closeConns()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r.request(cs[rng.IntN(len(cs))], rng)
			}
		}()
	}
	return &wg
}

// deletes is what the harness knows of the deletes of one name, to tell
// whether a create acknowledged as new came after every one of them.
type deletes struct {
	sent      int // deletes sent
	open      int // deletes sent and not answered yet
	uncertain int // 1 + the kill point of the last delete with no definite answer: its gateway may apply it while it lives
}

// deletesOf is the record of name's deletes; r.mu must be held.
func (r *run) deletesOf(name string) *deletes {
	if r.deletes[name] == nil {
		r.deletes[name] = &deletes{}
	}
	return r.deletes[name]
}

// settled reports whether no delete of name is open or may still be
// applied by the gateway alive now; r.mu must be held.
func (r *run) settled(name string) bool {
	d := r.deletesOf(name)
	if len(r.addrs) > 0 {
		// the leader that may apply an unanswered delete can outlive
		// any kill point but its own
		return d.open == 0 && d.uncertain == 0
	}
	return d.open == 0 && d.uncertain != r.kills+1
}

func (r *run) request(c api, rng *rand.Rand) {
	name := r.names[rng.IntN(len(r.names))]
	timeout := time.Second
	if rng.IntN(4) == 0 {
		timeout = time.Duration(1+rng.IntN(20)) * time.Millisecond // a caller that goes away
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var err error
	snapshot := fmt.Sprintf("snap-%d", rng.IntN(3))
	switch op := rng.IntN(15); {
	case op < 3:
		r.mu.Lock()
		sent := r.deletesOf(name).sent
		settled := r.settled(name) // no delete can land after this create but the ones sent from now on
		r.mu.Unlock()
		req := &corralv1.CreateSandboxRequest{Name: name, RequestId: fmt.Sprintf("%s-%d", name, rng.IntN(3)), Spec: r.backend.spec()}
		if rng.IntN(3) == 0 {
			req.FromSnapshot, req.RequestId = snapshot, req.RequestId+"-from-"+snapshot
		}
		var resp *corralv1.CreateSandboxResponse
		resp, err = c.CreateSandbox(ctx, req)
		if err == nil {
			r.mu.Lock()
			r.created[resp.Sandbox.Name] = true
			// A new sandbox clears the name's deletes only if none can
			// have come after it: one answered later, still open, or
			// unanswered to the gateway that made it may have removed it.
			if resp.Created && settled && r.deletesOf(name).sent == sent {
				delete(r.deleteAsked, resp.Sandbox.Name)
			}
			r.mu.Unlock()
		}
	case op < 5:
		_, err = c.StopSandbox(ctx, &corralv1.StopSandboxRequest{Name: name})
	case op < 8:
		_, err = c.StartSandbox(ctx, &corralv1.StartSandboxRequest{Name: name})
	case op < 10:
		_, err = c.PauseSandbox(ctx, &corralv1.PauseSandboxRequest{Name: name, Memory: rng.IntN(2) == 0})
		if status.Code(err) == codes.Unimplemented { // a backend whose driver cannot pause
			err = nil
		}
	case op < 11:
		_, err = c.ResumeSandbox(ctx, &corralv1.ResumeSandboxRequest{Name: name})
	case op < 13:
		_, err = c.snapshots.CreateSnapshot(ctx, &corralv1.CreateSnapshotRequest{Sandbox: name, Name: snapshot})
		err = snapshotRefusal(err)
	case op < 14:
		if rng.IntN(2) == 0 {
			_, err = c.snapshots.DeleteSnapshot(ctx, &corralv1.DeleteSnapshotRequest{Name: snapshot})
			break
		}
		// forks are named like the other sandboxes: fork-1 and fork-2
		_, err = c.snapshots.ForkSandbox(ctx, &corralv1.ForkSandboxRequest{Sandbox: name, Count: 2, NamePrefix: "fork"})
		err = snapshotRefusal(err)
	default:
		r.mu.Lock()
		r.deleteAsked[name] = true
		d, epoch := r.deletesOf(name), r.kills
		d.sent++
		d.open++
		r.mu.Unlock()
		_, err = c.DeleteSandbox(ctx, &corralv1.DeleteSandboxRequest{Name: name, Force: rng.IntN(2) == 0})
		r.mu.Lock()
		d.open--
		if code := status.Code(err); code == codes.DeadlineExceeded || code == codes.Canceled || code == codes.Unavailable {
			d.uncertain = epoch + 1
		}
		r.mu.Unlock()
	}
	switch status.Code(err) {
	case codes.OK, codes.NotFound, codes.AlreadyExists, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
	case codes.FailedPrecondition:
		// only "being deleted", request-id reuse, a pause of what does not
		// run (or with memory of what is frozen, or cannot be checkpointed)
		// and a resume of what is not paused are legitimate refusals
		if s := status.Convert(err).Message(); !containsAny(s, "being deleted", "request id", "only a running sandbox can be paused", "is not paused",
			"resume it first to pause it with --memory", "cannot pause with memory", "cannot be paused with --memory") {
			r.fail(refusal(err, "request refused: %v", err))
		}
	default:
		r.fail(refusal(err, "request failed: %v", err))
	}
	if status.Code(err) == codes.Unavailable {
		time.Sleep(5 * time.Millisecond) // the gateway is down; do not spin
	}
}

// snapshotRefusal is nil for what a snapshot or a fork may rightly be
// refused: a sandbox not ready, paused or stopped (or gone while it was
// paused for the copy), a fork's name taken, and the driver's failure
// injected into the call that reaches the sandbox's files (a snapshot
// waits for it, as no reconciler step does), and a driver that cannot
// reach files at all.
func snapshotRefusal(err error) error {
	msg := status.Convert(err).Message()
	if status.Code(err) == codes.Unimplemented { // a backend whose driver cannot reach files
		return nil
	}
	if status.Code(err) == codes.FailedPrecondition && !strings.Contains(msg, "still pending") || strings.Contains(msg, "fake workdir: chaos") {
		return nil
	}
	return err
}

func containsAny(s string, subs ...string) bool {
	return slices.ContainsFunc(subs, func(sub string) bool { return bytes.Contains([]byte(s), []byte(sub)) })
}

func (r *run) fail(v violation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clientFailures = append(r.clientFailures, v)
}

// torture runs the kill points.
func (r *run) torture(kills int) {
	if len(r.addrs) > 0 {
		r.tortureReplicas(kills)
		return
	}
	stop := make(chan struct{})
	wg := r.clients(stop, uint64(r.seed))
	for i := range kills {
		r.backend.faults(r.rng)
		g := r.start()
		// kill at a random instant: within the backend's lifetime from the
		// start (often within start-up recovery), or within 30 ms of it, or
		// within the lifetime once the gateway serves (so that a loaded
		// machine's slow start-ups still leave requests served)
		wait := time.Duration(r.rng.Int64N(int64(r.backend.lifetime())))
		switch r.rng.IntN(3) {
		case 0:
			wait = time.Duration(r.rng.IntN(30)) * time.Millisecond // start-up and recovery
		case 1:
			awaitReady(g, 10*time.Second)
		}
		select {
		case <-time.After(wait):
		case <-g.done:
			r.t.Fatalf("kill point %d: the gateway exited by itself:\n%s", i, r.log.String())
		}
		switch r.rng.IntN(3) {
		case 0:
			g.cmd.Process.Signal(syscall.SIGKILL)
			<-g.done
		case 1: // graceful
			g.cmd.Process.Signal(syscall.SIGTERM)
			r.awaitGraceful(g, i)
		default: // SIGTERM, then SIGKILL during the shutdown
			g.cmd.Process.Signal(syscall.SIGTERM)
			time.Sleep(time.Duration(r.rng.IntN(300)) * time.Millisecond)
			g.cmd.Process.Signal(syscall.SIGKILL)
			<-g.done
		}
		r.mu.Lock()
		r.kills++ // the gateway is gone: its unanswered deletes can no longer apply
		r.mu.Unlock()
	}
	close(stop)
	wg.Wait()
}

// tortureReplicas keeps a replica running on each address and, at each
// kill point, kills one of them at random (the leader or a standby) with
// SIGKILL, SIGTERM, or SIGTERM then SIGKILL, and starts it again.
func (r *run) tortureReplicas(kills int) {
	stop := make(chan struct{})
	wg := r.clients(stop, uint64(r.seed))
	live := make([]*gateway, len(r.addrs))
	for i, addr := range r.addrs {
		live[i] = r.startAt(addr)
	}
	for i := range kills {
		r.backend.faults(r.rng)
		wait := time.Duration(r.rng.Int64N(int64(3 * r.backend.lifetime())))
		if r.rng.IntN(3) == 0 {
			wait = time.Duration(r.rng.IntN(30)) * time.Millisecond
		}
		time.Sleep(wait)
		for j, g := range live {
			select {
			case <-g.done:
				r.t.Fatalf("kill point %d: replica %d exited by itself:\n%s", i, j, r.log.String())
			default:
			}
		}
		slot := r.rng.IntN(len(live))
		g := live[slot]
		switch r.rng.IntN(3) {
		case 0:
			g.cmd.Process.Signal(syscall.SIGKILL)
			<-g.done
		case 1:
			g.cmd.Process.Signal(syscall.SIGTERM)
			r.awaitGraceful(g, i)
		default:
			g.cmd.Process.Signal(syscall.SIGTERM)
			time.Sleep(time.Duration(r.rng.IntN(300)) * time.Millisecond)
			g.cmd.Process.Signal(syscall.SIGKILL)
			<-g.done
		}
		r.mu.Lock()
		r.kills++
		r.mu.Unlock()
		live[slot] = r.startAt(r.addrs[slot])
	}
	close(stop)
	wg.Wait()
	for _, g := range live {
		g.cmd.Process.Signal(syscall.SIGKILL)
		<-g.done
	}
}

// awaitReady waits until the gateway says it serves, it exits, or limit
// passes.
func awaitReady(g *gateway, limit time.Duration) {
	for end := time.Now().Add(limit); time.Now().Before(end) && !strings.Contains(g.out.String(), "gateway ready"); {
		select {
		case <-g.done:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// awaitGraceful waits for a SIGTERM'd gateway: it must exit 0 within its
// budget (1s) plus the cancellation grace (0.5s) and a second.
func (r *run) awaitGraceful(g *gateway, i int) {
	select {
	case <-g.done:
		code := g.cmd.ProcessState.ExitCode()
		switch {
		case code == 0 && strings.Contains(g.out.String(), " in=standby"):
			// It never held the store (on PostgreSQL, the last gateway's
			// session had not ended yet): what is pending is the next
			// holder's to settle, as no standby may.
		case code == 0:
			own, others := r.pending(instanceOf(g.out.String()))
			r.mu.Lock()
			if own > 0 {
				r.lastSigterm = append(r.lastSigterm, violated(shutdownLeftOwn, "kill point %d: a graceful shutdown left %d of its own journal entries pending", i, own))
			}
			if others > 0 && len(r.addrs) == 0 { // a live replica's are rightly pending
				r.lastSigterm = append(r.lastSigterm, violated(shutdownLeftDead, "kill point %d: a graceful shutdown left %d journal entries of dead instances pending", i, others))
			}
			r.mu.Unlock()
		case !r.lockedBy(g) && !strings.Contains(g.out.String(), "standby"):
			// The signal came before the gateway took its home lock, at
			// the latest within the Go runtime's own start (corral's
			// handler is subscribed at package init): nothing was opened.
			r.mu.Lock()
			r.preInit++
			r.mu.Unlock()
		default:
			k := badExit
			if ws, ok := g.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
				k = killedBySIGTERM // the signal met its default disposition
			}
			r.mu.Lock()
			r.lastSigterm = append(r.lastSigterm, violated(k, "kill point %d: SIGTERM gave exit code %d", i, code))
			r.mu.Unlock()
		}
	case <-time.After(2500 * time.Millisecond):
		r.mu.Lock()
		r.lastSigterm = append(r.lastSigterm, violated(noExit, "kill point %d: no exit within 2.5s of SIGTERM", i))
		r.mu.Unlock()
		g.cmd.Process.Kill()
		<-g.done
	}
}

// lockedBy reports whether a dead gateway had taken the home lock (its
// pid stays in the lock file when it dies by a signal).
func (r *run) lockedBy(g *gateway) bool {
	data, err := os.ReadFile(filepath.Join(r.home, "gateway.lock"))
	return err == nil && strings.TrimSpace(string(data)) == strconv.Itoa(g.cmd.Process.Pid)
}

// pending counts the journal entries left pending in the store of a
// stopped gateway: the ones of instance, and the others.
func (r *run) pending(instance string) (own, others int) {
	st, err := stores.Open(context.Background(), r.storeURL, r.home)
	if err != nil {
		r.t.Fatal(err)
	}
	defer st.Close()
	list, err := st.ListSandboxes(context.Background(), "")
	if err != nil {
		r.t.Fatal(err)
	}
	for _, sb := range list {
		ops, err := st.ListOperations(context.Background(), sb.ID)
		if err != nil {
			r.t.Fatal(err)
		}
		for _, op := range ops {
			switch {
			case op.State != "pending":
			case op.Owner == instance:
				own++
			default:
				others++
			}
		}
	}
	return own, others
}

// check starts a clean gateway and returns every invariant violation.
func (r *run) check() []violation {
	var v []violation
	v = append(v, r.lastSigterm...)
	v = append(v, r.clientFailures...)
	r.backend.clear()
	g := r.start()
	defer func() {
		g.cmd.Process.Signal(syscall.SIGTERM)
		<-g.done
	}()
	c, closeConn := r.client()
	defer closeConn()
	ctx := context.Background()

	// 1. every record converges to its intent
	var list []*corralv1.Sandbox
	var listErr error
	if testenv.Until(30*time.Second, func() error {
		resp, err := c.ListSandboxes(ctx, &corralv1.ListSandboxesRequest{})
		if listErr = err; err != nil {
			return err
		}
		list = resp.Sandboxes
		v = append(v, r.restartFailed(c, list)...)
		if unconverged(list) != nil {
			return errors.New("not converged")
		}
		return nil
	}) != nil {
		v = append(v, violated(notConverged, "not converged after 30s: %v (list error %v)", unconverged(list), listErr))
	}
	r.checked = len(list)
	// 2. nothing created and never deleted is lost
	names := map[string]*corralv1.Sandbox{}
	for _, sb := range list {
		names[sb.Name] = sb
	}
	r.mu.Lock()
	for name := range r.created {
		if !r.deleteAsked[name] && names[name] == nil {
			v = append(v, violated(lost, "sandbox %q was created, never asked to be deleted, and is gone", name))
		}
	}
	r.mu.Unlock()
	// 3. the driver agrees with the records; orphans do not outlive the grace
	time.Sleep(time.Second) // orphan grace 300ms + resync 200ms, twice
	objs := r.backend.objects()
	if resp, err := c.ListSandboxes(ctx, &corralv1.ListSandboxesRequest{}); err == nil {
		list = resp.Sandboxes // as of now, not of before the grace: a main process may have exited since
	}
	for _, sb := range list {
		o, ok := objs[sb.Id]
		running := ok && (o.State == driver.StateRunning || o.State == driver.StatePaused)
		switch {
		case sb.Phase == "ready" && ok && o.State == driver.StatePaused && o.Generation == sb.Generation:
			if err := testenv.Until(5*time.Second, func() error { return r.stillReady(c, sb.Name) }); err != nil {
				v = append(v, violated(driverDisagrees, "sandbox %s is believed running but its compute is paused", sb.Name))
			}
		case sb.DesiredState == "paused" && sb.Phase == "paused" && (!ok || o.State != driver.StatePaused || o.Generation != sb.Generation):
			// a supervisor killed by the backend's last fault: the gateway
			// must see it, as for a ready one
			if err := testenv.Until(5*time.Second, func() error { return r.stillPaused(c, sb.Name) }); err != nil {
				v = append(v, violated(driverDisagrees, "sandbox %s is paused but its compute is %+v (found %v): %v", sb.Name, o, ok, err))
			}
		case sb.DesiredState == "running" && sb.Phase == "ready" && (!running || o.Generation != sb.Generation):
			// An exit the driver reports may take the gateway a moment
			// (Docker's die event, looked at again 200 ms later): it must
			// catch up, not stay ready.
			if err := testenv.Until(5*time.Second, func() error { return r.stillReady(c, sb.Name) }); err != nil {
				v = append(v, violated(driverDisagrees, "sandbox %s is ready but its compute is %+v (found %v): %v", sb.Name, o, ok, err))
			}
		case sb.DesiredState == "stopped" && running:
			v = append(v, violated(driverDisagrees, "sandbox %s is stopped but its compute runs", sb.Name))
		}
		delete(objs, sb.Id)
	}
	for id := range objs {
		v = append(v, violated(orphan, "compute object %s has no record after the orphan grace period", id))
	}
	// 4. no journal entry is unsettled past its deadline, and none is
	// left pending by an instance that is gone (recovery settles those)
	current := instanceOf(g.out.String())
	for _, sb := range list {
		ops, err := c.ListOperations(ctx, &corralv1.ListOperationsRequest{Name: sb.Id})
		if err != nil {
			v = append(v, violated(journalUnreadable, "journal of %s: %v", sb.Name, err))
			continue
		}
		for _, op := range ops.Operations {
			switch {
			case op.State != "pending":
			case op.Deadline.AsTime().Before(time.Now()):
				v = append(v, violated(pendingPastDeadline, "journal entry %d (%s of %s) pending past its deadline", op.Id, op.Kind, sb.Name))
			case op.Owner != current:
				v = append(v, violated(pendingForGone, "journal entry %d (%s of %s) still pending for instance %s, which is gone", op.Id, op.Kind, sb.Name, op.Owner))
			}
		}
	}
	// 5. every sandbox can be deleted through the API
	for _, sb := range list {
		if _, err := c.DeleteSandbox(ctx, &corralv1.DeleteSandboxRequest{Name: sb.Id}); err != nil {
			if k := refusal(err, "").kind; k == stillPending {
				v = append(v, violated(k, "delete %s: %v", sb.Name, err))
			} else {
				v = append(v, violated(undeletable, "delete %s: %v", sb.Name, err))
			}
		}
	}
	var left *corralv1.ListSandboxesResponse
	if testenv.Until(30*time.Second, func() error {
		resp, err := c.ListSandboxes(ctx, &corralv1.ListSandboxesRequest{})
		if left = resp; err != nil {
			return err
		}
		if len(resp.Sandboxes) > 0 || len(r.backend.objects()) > 0 {
			return errors.New("not everything is deleted")
		}
		return nil
	}) != nil {
		v = append(v, violated(undeletable, "not everything could be deleted: records %v, objects %d", left.GetSandboxes(), len(r.backend.objects())))
	}
	// 6. every snapshot listed is whole: it exports to its last byte, every
	// file checked against its digest; and it deletes
	if snaps, err := c.snapshots.ListSnapshots(ctx, &corralv1.ListSnapshotsRequest{}); err != nil {
		v = append(v, violated(halfSnapshot, "list snapshots: %v", err))
	} else {
		for _, snap := range snaps.Snapshots {
			if err := exportAll(ctx, c, snap.Name); err != nil {
				v = append(v, violated(halfSnapshot, "snapshot %s is listed but does not export whole: %v", snap.Name, err))
			}
			if _, err := c.snapshots.DeleteSnapshot(ctx, &corralv1.DeleteSnapshotRequest{Name: snap.Id}); err != nil {
				v = append(v, violated(halfSnapshot, "delete snapshot %s: %v", snap.Name, err))
			}
		}
	}
	// 7. no two gateways called the driver for one sandbox at once
	if fb, ok := r.backend.(*fakeBackend); ok {
		overlaps, err := fake.Overlaps(fb.dir)
		if err != nil {
			v = append(v, violated(twoDrivers, "overlaps: %v", err))
		}
		for _, o := range overlaps {
			v = append(v, violated(twoDrivers, "two gateways drove one sandbox at once: %s", o))
		}
	}
	// 8. the store is intact, and holds no snapshot left half taken
	g.cmd.Process.Signal(syscall.SIGTERM)
	<-g.done
	st, err := stores.Open(ctx, r.storeURL, r.home)
	if err != nil {
		return append(v, violated(storeDamaged, "store: %v", err))
	}
	defer st.Close()
	if lite, ok := st.(*sqlite.Store); ok {
		if err := lite.IntegrityCheck(ctx); err != nil {
			v = append(v, violated(storeDamaged, "integrity_check: %v", err))
		}
	}
	if snaps, err := st.ListSnapshots(ctx, ""); err != nil || len(snaps) > 0 {
		v = append(v, violated(halfSnapshot, "after every snapshot's delete, the store keeps %d (%v)", len(snaps), err))
	}
	return v
}

// exportAll reads a snapshot's export to its end.
func exportAll(ctx context.Context, c api, name string) error {
	stream, err := c.snapshots.ExportSnapshot(ctx, &corralv1.ExportSnapshotRequest{Name: name})
	if err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// restartFailed starts, as an operator would, the sandboxes whose compute
// failed under them (a killed supervisor): they rest in error until then.
func (r *run) restartFailed(c corralv1.SandboxServiceClient, list []*corralv1.Sandbox) []violation {
	var v []violation
	for _, sb := range list {
		if (sb.DesiredState == "running" || sb.DesiredState == "paused") && sb.Phase == "error" && strings.Contains(sb.Reason, "compute failed") {
			if _, err := c.StartSandbox(context.Background(), &corralv1.StartSandboxRequest{Name: sb.Id}); err != nil {
				v = append(v, refusal(err, "start of %s after its compute failed: %v", sb.Name, err))
			}
		}
	}
	return v
}

// instanceOf returns the instance id a gateway's log gives itself.
func instanceOf(log string) string {
	_, rest, _ := strings.Cut(log, `msg="gateway starting" instance=`)
	id, _, _ := strings.Cut(rest, " ")
	return id
}

// unconverged lists the records whose phase does not match their intent.
func unconverged(list []*corralv1.Sandbox) []string {
	var out []string
	for _, sb := range list {
		ok := (sb.DesiredState == "running" && (sb.Phase == "ready" || sb.Phase == "exited")) ||
			(sb.DesiredState == "stopped" && sb.Phase == "stopped") ||
			(sb.DesiredState == "paused" && (sb.Phase == "paused" || sb.Phase == "exited"))
		if !ok {
			out = append(out, fmt.Sprintf("%s:%s/%s(%s)", sb.Name, sb.DesiredState, sb.Phase, sb.Reason))
		}
	}
	return out
}

// TestHarnessCatchesTheFailuresOfDesign re-introduces each failure docs/design.md
// was written from (in the test build of corral, behind testbug's switch)
// and requires the harness to report the violation that failure causes,
// not just any.
func TestHarnessCatchesTheFailuresOfDesign(t *testing.T) {
	for _, tc := range []struct {
		bug      string
		want     []kind // any one of them
		replicas bool   // three replicas on one PostgreSQL store
	}{
		// SIGTERM during start-up recovery meets the default disposition
		{testbug.LateSignalHandler, []kind{killedBySIGTERM}, false},
		// a graceful shutdown returns with driver calls in flight, unsettled
		{testbug.UnawaitedWorker, []kind{shutdownLeftOwn}, false},
		// a dead instance's claim stays pending and refuses every request
		{testbug.RetainedClaim, []kind{stillPending}, false},
		// replicas that all lead drive the same sandboxes at once
		{testbug.Unleased, []kind{twoDrivers}, true},
	} {
		t.Run(tc.bug, func(t *testing.T) {
			var caught, other []violation
			for seed := int64(1); seed <= 12 && len(caught) == 0; seed++ { // each failure shows only at some kill points
				r := newRun(t, seed)
				if tc.replicas {
					testenv.RequirePostgres(t)
					r.onPostgres()
					r.asReplicas(3)
				}
				r.env = []string{testbug.ReintroduceEnv + "=" + tc.bug}
				r.torture(60)
				for _, v := range r.check() {
					if slices.Contains(tc.want, v.kind) {
						caught = append(caught, v)
					} else {
						other = append(other, v)
					}
				}
			}
			kinds := map[kind]int{}
			for _, v := range other {
				kinds[v.kind]++
			}
			if len(caught) == 0 {
				t.Fatalf("the harness did not report %v for the re-introduced %s failure (other violations: %v)", tc.want, tc.bug, kinds)
			}
			t.Logf("%s caught: %s (and %d more of the kind; other violations: %v)", tc.bug, caught[0], len(caught)-1, kinds)
		})
	}
}

// stillReady is an error while the record of name says ready and its
// compute does not run.
func (r *run) stillReady(c corralv1.SandboxServiceClient, name string) error {
	return r.still(c, name, "ready", driver.StateRunning)
}

// stillPaused is stillReady for a paused record: its compute must be
// frozen, or the record must say otherwise.
func (r *run) stillPaused(c corralv1.SandboxServiceClient, name string) error {
	return r.still(c, name, "paused", driver.StatePaused)
}

// still returns an error while the record of name is in phase but its
// compute is not in state at its generation.
func (r *run) still(c corralv1.SandboxServiceClient, name, phase string, state driver.State) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sb, err := c.GetSandbox(ctx, &corralv1.GetSandboxRequest{Name: name})
	if err != nil {
		return err
	}
	o, ok := r.backend.objects()[sb.Id]
	if sb.Phase == phase && (!ok || o.State != state || o.Generation != sb.Generation) {
		return fmt.Errorf("still %s, compute %+v", phase, o)
	}
	return nil
}
