// Package driver defines the narrow interface between the lifecycle engine
// and a compute backend. Every method is idempotent, takes a context with a
// deadline, and addresses objects by sandbox id (and generation), found by
// the gateway's label, never by name alone.
package driver

import (
	"context"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/corral-sandbox/corral/internal/policy"
)

// Driver is a compute backend.
type Driver interface {
	// Name is the driver's name, as given to --driver.
	Name() string
	// Create makes the compute object for spec.ID at spec.Generation without
	// starting it. An object that already exists for the same id and
	// generation is adopted: Create then succeeds. An object of another
	// generation that is not running is replaced (a new incarnation); a
	// running one is errdefs.ErrFailedPrecondition.
	Create(ctx context.Context, spec Spec) error
	// Start runs the object and returns once its main process runs.
	// Starting a running object succeeds. A missing object is
	// errdefs.ErrNotFound, one of another generation
	// errdefs.ErrFailedPrecondition.
	Start(ctx context.Context, ref Ref) error
	// Stop stops the object. A stopped or missing object succeeds.
	Stop(ctx context.Context, ref Ref, opts StopOptions) error
	// Delete removes every object of the sandbox id. Missing succeeds.
	Delete(ctx context.Context, id string) error
	// Inspect returns the object of a sandbox id, or errdefs.ErrNotFound.
	Inspect(ctx context.Context, id string) (Object, error)
	// List returns every object that carries this gateway's label.
	List(ctx context.Context) ([]Object, error)
	// Close releases the driver's resources; objects keep running.
	Close() error
}

// Spec is what the driver needs to create a compute object.
type Spec struct {
	ID         string
	Name       string
	Generation int64
	Image      string
	Command    []string
	Labels     map[string]string
	// Policy is the sandbox's policy, parsed and validated (policy.Parse
	// of nothing is policy.Default()). Its zero value is no policy a driver
	// can apply: a start with it fails, it never runs unprotected.
	Policy policy.Policy
}

// Ref names one incarnation of a sandbox's compute object.
type Ref struct {
	ID         string
	Generation int64
}

// StopOptions tune Stop.
type StopOptions struct {
	// Timeout is how long the main process gets between SIGTERM and SIGKILL.
	Timeout time.Duration
	// Force kills at once.
	Force bool
}

// State is what a driver observed of an object.
type State string

// The object states.
const (
	StateCreated State = "created"
	StateRunning State = "running"
	// StatePaused: running, every process frozen (Pauser).
	StatePaused  State = "paused"
	StateStopped State = "stopped" // ran, and its main process has exited
	// StateFailed: the object broke while it ran (its supervisor was
	// killed, say) and no exit of its main process was recorded; Message
	// says what is known.
	StateFailed State = "failed"
)

// Object is a driver's view of one compute object.
type Object struct {
	ID         string
	Generation int64
	State      State
	// ExitCode is the main process's exit status once State is stopped.
	ExitCode int
	Labels   map[string]string
	// Message is the driver's own explanation of the state, if any.
	Message string
	// Protections says what of the policy protects a running object's
	// main process ("landlock ABI 7; no_new_privs; seccomp default").
	Protections string
}

// Label keys every driver puts on its compute objects; the value of the
// gateway's own label (Config.Label) marks objects of this gateway.
const (
	LabelSandboxID  = "corral.sandbox.id"
	LabelGeneration = "corral.sandbox.generation"
	LabelName       = "corral.sandbox.name"
	// LabelGateway is the identity of the gateway (its store's) that made
	// an object: gateways that share an engine and a label key tell their
	// objects apart by it.
	LabelGateway = "corral.gateway"
)

// OwnerOf returns the identity of the gateway that made an object of
// these labels, and whether that is another gateway than gateway. An
// object without one (made before gateways had identities) is taken as
// gateway's own.
func OwnerOf(labels map[string]string, gateway string) (owner string, foreign bool) {
	owner = labels[LabelGateway]
	return owner, owner != "" && gateway != "" && owner != gateway
}

// Config is what every driver is constructed with.
type Config struct {
	// Label is the key of the label that marks this gateway's objects;
	// its value is always "true".
	Label string
	// Gateway is this gateway's identity, put on every object as
	// LabelGateway.
	Gateway string
	// StateDir is a directory the driver may keep files in.
	StateDir string
	// LogMaxBytes caps what is kept on disk of each sandbox's output
	// (0: DefaultLogMaxBytes).
	LogMaxBytes int64
	// Egress, when set, is the proxy every sandbox's traffic leaves through;
	// nil: sandboxes have no way out at all (no network_policies).
	Egress Egress
	// Epoch is the store's lease's of the gateway that drives: it grows
	// with every replica that takes the store over (0 on a store one
	// gateway holds alone). A backend that can refuse a stale caller
	// fences with it; the fake driver records it on every call.
	Epoch int64
}

// DefaultLogMaxBytes is what is kept of a sandbox's output by default.
const DefaultLogMaxBytes = 10 << 20

// LogMax is the cap on a sandbox's kept output.
func (c Config) LogMax() int64 {
	if c.LogMaxBytes > 0 {
		return c.LogMaxBytes
	}
	return DefaultLogMaxBytes
}

// Watcher is a driver that reports changes of its objects as they happen
// (a main process that exits, say), so the gateway need not poll.
type Watcher interface {
	// Watch calls changed with the sandbox id of every object that changes,
	// until ctx ends or the event source fails.
	Watch(ctx context.Context, changed func(id string)) error
}

// Pauser is a driver that can freeze every process of a running
// incarnation, memory kept and no CPU used, and thaw them. A paused
// incarnation is StatePaused; Stop and Delete work on one (thawing it
// first where the compute needs that).
type Pauser interface {
	// Pause freezes the incarnation; a paused one stays paused.
	// errdefs.ErrNotFound when it does not run.
	Pause(ctx context.Context, ref Ref) error
	// Resume thaws it; a running one stays running.
	Resume(ctx context.Context, ref Ref) error
}

// MemoryPauser is a Pauser that can also pause an incarnation by
// checkpointing its processes and memory out to the gateway's host and
// freeing the memory (the gVisor tier on native). Such an incarnation is
// StatePaused, whatever becomes of the gateway, until Pauser.Resume
// restores it; Stop ends it as stopped. Which sandboxes it can pause so is
// the policy's (policy.Lifecycle.MemorySnapshots).
type MemoryPauser interface {
	Pauser
	// PauseMemory checkpoints the incarnation out; one paused so stays.
	// errdefs.ErrNotFound when it does not run; errdefs.ErrFailedPrecondition
	// when it cannot be checkpointed (frozen by Pause, say), saying why.
	PauseMemory(ctx context.Context, ref Ref) error
}

// Execer is a driver that can run a command inside a running sandbox,
// through the sandbox's exec stage (so the sandbox's protections apply).
type Execer interface {
	// Exec runs opts.Command and returns its exit code.
	Exec(ctx context.Context, id string, opts ExecOptions) (int, error)
}

// ExecOptions describe one command run by Exec.
type ExecOptions struct {
	Command []string
	TTY     bool
	Size    TerminalSize
	// Stdin, when set, feeds the command's standard input until EOF.
	Stdin          io.Reader
	Stdout, Stderr io.Writer // with TTY, everything goes to Stdout
	Resize         <-chan TerminalSize
}

// TerminalSize is a terminal's size in characters.
type TerminalSize struct{ Rows, Cols uint }

// Validator is a driver that can tell a spec it will never run (an image
// it cannot use, say) before a sandbox is recorded.
type Validator interface {
	// Validate returns an errdefs.ErrInvalidArgument error naming what is
	// wrong, or nil. It does not look at the id or generation.
	Validate(spec Spec) error
}

// LogReader is a driver that keeps what a sandbox's main process printed.
type LogReader interface {
	// Logs copies the output, following new output until ctx ends when
	// opts.Follow is set.
	Logs(ctx context.Context, id string, opts LogOptions, stdout, stderr io.Writer) error
}

// LogOptions tune Logs.
type LogOptions struct {
	Follow bool
	Tail   int // lines from the end; 0 means all
}

// ObjectLabels are the labels of a compute object for spec: the spec's own,
// the gateway's label and identity, the sandbox id, name and generation.
func (c Config) ObjectLabels(spec Spec) map[string]string {
	labels := make(map[string]string, len(spec.Labels)+5)
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[c.Label] = "true"
	if c.Gateway != "" {
		labels[LabelGateway] = c.Gateway
	}
	labels[LabelSandboxID] = spec.ID
	labels[LabelName] = spec.Name
	labels[LabelGeneration] = strconv.FormatInt(spec.Generation, 10)
	return labels
}

// Imager is a driver that keeps images of its own (a cache, or an engine's
// store), so users can pull, list and remove them.
type Imager interface {
	// PullImage brings ref into the driver's store, reporting progress as
	// it goes; an image already there is only resolved again.
	PullImage(ctx context.Context, ref string, progress func(ImageProgress)) (ImageInfo, error)
	// ListImages returns the images in the store.
	ListImages(ctx context.Context) ([]ImageInfo, error)
	// RemoveImage removes an image by a name or id; one that a sandbox
	// uses is errdefs.ErrFailedPrecondition, an unknown one ErrNotFound.
	RemoveImage(ctx context.Context, ref string) (ImageInfo, error)
	// PruneImages removes every image of the store that no sandbox uses
	// (stopped ones included) and returns what it removed.
	PruneImages(ctx context.Context) ([]ImageInfo, error)
}

// LocalImager is an Imager some of whose images are used where they are,
// never pulled (the native driver's host and root directories).
type LocalImager interface {
	Imager
	// LocalImage says whether image is one of those.
	LocalImage(image string) bool
}

// ImageInfo describes an image of a driver's store.
type ImageInfo struct {
	ID      string // "sha256:…"
	Refs    []string
	Size    int64
	Created time.Time
	// Sandboxes is how many sandboxes use it.
	Sandboxes int
}

// ImageProgress is one step of a pull.
type ImageProgress struct {
	Layer          string // a layer's digest; "" is the image as a whole
	Status         string // "resolving", "downloading", "unpacking", "cached", "done", or an engine's own word
	Current, Total int64  // bytes, when known
}

// Workdirs is a driver whose sandboxes' /sandbox can be reached from the
// gateway's host while they are stopped (it is kept across incarnations),
// so their files can be copied with no process running inside.
type Workdirs interface {
	// Workdir returns the host directory that is the sandbox's /sandbox, or
	// errdefs.ErrFailedPrecondition saying why it cannot be reached while
	// the sandbox is stopped, or errdefs.ErrNotFound.
	Workdir(ctx context.Context, id string) (string, error)
}

// WorkdirOpener is a driver whose sandboxes' /sandbox can be opened from
// the gateway's host whether they run (paused, for a consistent copy) or
// not, a limits.disk image included, which Workdirs cannot give as a path.
type WorkdirOpener interface {
	// OpenWorkdir returns the sandbox's /sandbox as an os.Root and what
	// releases it once the root is closed (unmounting what it mounted for
	// the call), or errdefs.ErrNotFound, or errdefs.ErrFailedPrecondition
	// saying why it cannot be reached now.
	OpenWorkdir(ctx context.Context, id string) (*os.Root, func(), error)
}

// Seeder is a driver that can fill a created sandbox's /sandbox from a tar
// stream (a snapshot's files) before its first start. Entries replace what
// is there, so a seed cut short is made again whole. What it writes
// belongs to the sandbox's user once the sandbox starts (GiveTree).
type Seeder interface {
	// Seed unpacks r (through safetar: nothing outside /sandbox is
	// reached) into the /sandbox of the incarnation ref, which exists and
	// has not started. errdefs.ErrNotFound when it does not exist.
	Seed(ctx context.Context, ref Ref, r io.Reader) error
}

// Checkpointer is a driver that can checkpoint a running incarnation's
// processes and memory to an image (the gVisor tier on native), and start
// an incarnation from one (MemorySeeder). Which sandboxes it can
// checkpoint is the policy's (policy.Lifecycle.MemorySnapshots).
type Checkpointer interface {
	// Checkpoint writes the memory image of the running incarnation ref
	// (image: its path on the gateway's host, to be read before resume)
	// and holds its processes stopped (so that its files can be copied as
	// they were) until resume is called, or the gateway goes away, which
	// restores them in place from the image. errdefs.ErrNotFound when it
	// does not run; errdefs.ErrFailedPrecondition when it cannot be
	// checkpointed, saying why.
	Checkpoint(ctx context.Context, ref Ref) (image string, resume func() error, err error)
	// SeedMemory puts a memory image (as Checkpoint wrote it, the file
	// MemoryImage) in the created incarnation ref, which has not started:
	// its first start restores it instead of running its command.
	SeedMemory(ctx context.Context, ref Ref, image io.Reader) error
}

// MemoryImage is the file a Checkpointer writes in its dir.
const MemoryImage = "checkpoint.img"

// Leftovers is a driver whose sandboxes keep storage apart from their
// compute objects (Docker's workdir volumes), which can outlive them: a
// create cut short by a delete may still make its volume after the delete
// ran. The orphan collection removes what it lists as it does orphaned
// compute objects, by Delete.
type Leftovers interface {
	// Leftovers lists, as objects, the sandboxes that have storage with
	// this gateway's label but no object in compute (what List returned
	// just before: storage listed after its compute object is never
	// mistaken for a leftover).
	Leftovers(ctx context.Context, compute []Object) ([]Object, error)
}

// Tier is an isolation tier (a policy's isolation value) and whether a
// driver can run sandboxes on it.
type Tier struct {
	Name      string
	Available bool
	// Detail says what runs the tier, or why it is not available.
	Detail string
}

// Tierer is a driver that can run sandboxes on tiers beyond
// policy.IsolationNamespaces (which every driver runs).
type Tierer interface {
	// Tiers says, for each tier, whether the driver can run it now.
	Tiers(ctx context.Context) []Tier
}
