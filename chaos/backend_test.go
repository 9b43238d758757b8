package chaos

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"k8s.io/client-go/tools/clientcmd"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
	"github.com/corral-sandbox/corral/internal/driver/kubernetes"
	"github.com/corral-sandbox/corral/internal/driver/native"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// backend is what the harness needs of a driver: how the gateway uses it,
// how to inject faults into it, and the driver's own view of its objects.
type backend interface {
	args() []string
	faults(rng *rand.Rand)
	clear()
	objects() map[string]driver.Object
	// lifetime bounds how long a gateway lives before it is killed.
	lifetime() time.Duration
	// spec is what the harness creates sandboxes with.
	spec() *corralv1.SandboxSpec
}

func (b *fakeBackend) lifetime() time.Duration   { return 300 * time.Millisecond }
func (b *dockerBackend) lifetime() time.Duration { return 2 * time.Second }

// The fake driver runs what it is given; its sandboxes' policy lets them
// be paused with memory too. Images run what they are given by default.
func (b *fakeBackend) spec() *corralv1.SandboxSpec {
	return &corralv1.SandboxSpec{Policy: "version: 1\nisolation: gvisor\nlifecycle: {memory_snapshots: true}\n"}
}
func (b *dockerBackend) spec() *corralv1.SandboxSpec {
	if b.isolation == "" {
		return nil
	}
	return &corralv1.SandboxSpec{Policy: "version: 1\nisolation: " + b.isolation + "\n"}
}

// fakeBackend injects faults through the fake driver's rules file.
type fakeBackend struct {
	t     *testing.T
	dir   string
	label string
}

func (b *fakeBackend) args() []string { return []string{"--driver", "fake"} }

func (b *fakeBackend) faults(rng *rand.Rand) {
	var rules []faults.Rule
	ops := []string{"create", "start", "stop", "delete", "inspect", "pause", "pause-memory", "resume", "workdir", "seed"}
	for range rng.IntN(3) {
		rule := faults.Rule{Op: ops[rng.IntN(len(ops))], After: rng.IntN(3) == 0}
		switch rng.IntN(3) {
		case 0:
			rule.Action = "hold"
		case 1:
			rule.Action, rule.Delay = "delay", fmt.Sprintf("%dms", 1+rng.IntN(200))
		default:
			rule.Action, rule.Error = "fail", "chaos"
		}
		rules = append(rules, rule)
	}
	if err := faults.Set(b.dir, rules...); err != nil {
		b.t.Fatal(err)
	}
}

func (b *fakeBackend) clear() {
	if err := faults.Set(b.dir); err != nil {
		b.t.Fatal(err)
	}
}

func (b *fakeBackend) objects() map[string]driver.Object {
	d, err := fake.New(driver.Config{Label: b.label, StateDir: b.dir}, fake.Options{})
	return objectsOf(b.t, d, err)
}

// objectsOf lists a driver's objects by sandbox id.
func objectsOf(t *testing.T, d driver.Driver, err error) map[string]driver.Object {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	list, err := d.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]driver.Object{}
	for _, o := range list {
		out[o.ID] = o
	}
	return out
}

// dockerBackend drives a real engine through a relay that holds chosen
// Engine API requests or goes away altogether.
type dockerBackend struct {
	t         *testing.T
	label     string
	relay     *testenv.Relay
	api       *client.Client
	isolation string // the sandboxes' policy's isolation tier; "" is the default
}

func newDockerBackend(t *testing.T, label, isolation string) *dockerBackend {
	api, err := testenv.DockerClient()
	if err != nil {
		t.Fatal(err)
	}
	b := &dockerBackend{t: t, label: label, relay: testenv.NewRelay(t, testenv.DockerSocket()), api: api, isolation: isolation}
	t.Cleanup(func() { b.removeAll(); api.Close() })
	return b
}

func (b *dockerBackend) args() []string {
	return []string{"--driver", "docker", "--docker-host", "unix://" + b.relay.Path, "--default-image", testenv.TestImage,
		"--image-pull-policy", "never"}
}

func (b *dockerBackend) faults(rng *rand.Rand) {
	b.relay.Release()
	b.relay.Up()
	switch rng.IntN(4) {
	case 0:
		patterns := []string{`/containers/create$`, `/containers/[0-9a-f]+/start$`, `/containers/[0-9a-f]+/stop$`, `DELETE /`, `/containers/json$`}
		b.relay.Hold(`^[A-Z]+ .*` + patterns[rng.IntN(len(patterns))])
	case 1:
		b.relay.Down()
	}
}

func (b *dockerBackend) clear() {
	b.relay.Release()
	b.relay.Up()
}

func (b *dockerBackend) objects() map[string]driver.Object {
	res, err := b.api.ContainerList(context.Background(), client.ContainerListOptions{All: true,
		Filters: client.Filters{}.Add("label", b.label+"=true")})
	if err != nil {
		b.t.Fatal(err)
	}
	out := map[string]driver.Object{}
	for _, c := range res.Items {
		id := c.Labels[driver.LabelSandboxID]
		gen, _ := strconv.ParseInt(c.Labels[driver.LabelGeneration], 10, 64)
		if cur, ok := out[id]; ok && cur.Generation > gen {
			continue
		}
		state := driver.StateStopped
		switch c.State {
		case "running", "restarting":
			state = driver.StateRunning
		case "paused": // as the driver reports it, and as the final check compares a paused record
			state = driver.StatePaused
		case "created":
			state = driver.StateCreated
		}
		out[id] = driver.Object{ID: id, Generation: gen, State: state}
	}
	return out
}

func (b *dockerBackend) removeAll() {
	ctx := context.Background()
	res, err := b.api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", b.label+"=true")})
	if err != nil {
		return
	}
	for _, c := range res.Items {
		b.api.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	}
	// The sandboxes' workdir volumes are named, so RemoveVolumes leaves them.
	vols, err := b.api.VolumeList(ctx, client.VolumeListOptions{Filters: client.Filters{}.Add("label", b.label+"=true")})
	if err != nil {
		return
	}
	for _, v := range vols.Items {
		b.api.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true})
	}
}

// nativeBackend runs the native driver; its faults are supervisors killed
// at random instants (a crash of the sandbox's PID 1).
type nativeBackend struct {
	t     *testing.T
	dir   string
	label string
	rng   *rand.Rand
}

func (b *nativeBackend) args() []string { return []string{"--driver", "native"} }

func (b *nativeBackend) spec() *corralv1.SandboxSpec {
	return &corralv1.SandboxSpec{Command: []string{"sleep", "1000"}}
}

func (b *nativeBackend) lifetime() time.Duration { return time.Second }

func (b *nativeBackend) faults(rng *rand.Rand) {
	if rng.IntN(3) == 0 {
		b.killSupervisor(rng.IntN(100))
	}
	if rng.IntN(3) == 0 { // while the next gateway runs
		pick := rng.IntN(100)
		time.AfterFunc(time.Duration(rng.Int64N(int64(b.lifetime()))), func() { b.killSupervisor(pick) })
	}
}

// killSupervisor SIGKILLs the pick-th (modulo) live supervisor.
func (b *nativeBackend) killSupervisor(pick int) {
	procs, err := testenv.Supervisors(b.dir)
	if err != nil || len(procs) == 0 {
		return
	}
	pids := slices.Sorted(maps.Keys(procs))
	pid := pids[pick%len(pids)]
	if syscall.Kill(pid, syscall.SIGKILL) == nil {
		b.t.Logf("fault: SIGKILL to supervisor %d (%s)", pid, procs[pid])
	}
}

func (b *nativeBackend) clear() {}

// objects is the driver's view, and every live supervisor besides: one
// whose sandbox the driver does not list as running or paused, or of an
// old generation, is a leak.
func (b *nativeBackend) objects() map[string]driver.Object {
	d, err := native.New(driver.Config{Label: b.label, StateDir: b.dir}, native.Options{})
	out := objectsOf(b.t, d, err)
	procs, err := testenv.Supervisors(b.dir)
	if err != nil {
		b.t.Fatal(err)
	}
	for pid, bundle := range procs {
		id, gen := filepath.Base(filepath.Dir(bundle)), strings.TrimPrefix(filepath.Base(bundle), "gen-")
		if o, ok := out[id]; !ok || strconv.FormatInt(o.Generation, 10) != gen || (o.State != driver.StateRunning && o.State != driver.StatePaused) {
			out[fmt.Sprintf("supervisor %d (%s)", pid, bundle)] = driver.Object{State: driver.StateRunning}
		}
	}
	return out
}

// kubeBackend runs the kubernetes driver on a cluster of
// testenv.KubeconfigEnv (an API server whose kubelet is played), through
// a TCP switch that takes the API server away at random.
type kubeBackend struct {
	t          *testing.T
	label      string
	namespace  string
	direct     string // the kubeconfig of the cluster
	kubeconfig string // the one through the switch, the gateway's
	sw         *testenv.TCPSwitch
}

// The played kubelet's images: no image is pulled or run.
const (
	kubeSupervisorImage = "corral-test/supervisor:dev"
	kubeImage           = "corral-test/busybox:latest"
)

func newKubeBackend(t *testing.T, label string) *kubeBackend {
	direct := testenv.RequireKubernetes(t)
	cfg, err := clientcmd.LoadFromFile(direct)
	if err != nil {
		t.Fatal(err)
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil || cfg.Clusters[kctx.Cluster] == nil {
		t.Fatalf("%s: no current context", direct)
	}
	u, err := url.Parse(cfg.Clusters[kctx.Cluster].Server)
	if err != nil {
		t.Fatal(err)
	}
	b := &kubeBackend{t: t, label: label, namespace: cmp.Or(kctx.Namespace, "default"), direct: direct, sw: testenv.NewTCPSwitch(t, u.Host)}
	cfg.Clusters[kctx.Cluster].Server = "https://" + b.sw.Addr
	b.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, b.kubeconfig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.removeAll)
	return b
}

func (b *kubeBackend) args() []string {
	return []string{"--driver", "kubernetes", "--kubeconfig", b.kubeconfig, "--namespace", b.namespace,
		"--kube-supervisor-image", kubeSupervisorImage, "--default-image", kubeImage}
}

func (b *kubeBackend) spec() *corralv1.SandboxSpec {
	return &corralv1.SandboxSpec{Command: []string{"sleep", "3600"}}
}

func (b *kubeBackend) lifetime() time.Duration { return 2 * time.Second }

func (b *kubeBackend) faults(rng *rand.Rand) {
	b.sw.Up(b.t)
	if rng.IntN(4) == 0 {
		b.sw.Down()
	}
}

func (b *kubeBackend) clear() { b.sw.Up(b.t) }

func (b *kubeBackend) driver() (*kubernetes.Driver, error) {
	return kubernetes.New(driver.Config{Label: b.label}, kubernetes.Options{Kubeconfig: b.direct, Namespace: b.namespace, SupervisorImage: kubeSupervisorImage})
}

func (b *kubeBackend) objects() map[string]driver.Object {
	d, err := b.driver()
	return objectsOf(b.t, d, err)
}

// removeAll deletes what the run left on the cluster.
func (b *kubeBackend) removeAll() {
	d, err := b.driver()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, _ := d.List(ctx)
	left, _ := d.Leftovers(ctx, list)
	for _, o := range append(list, left...) {
		d.Delete(ctx, o.ID)
	}
}
