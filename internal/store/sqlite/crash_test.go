package sqlite

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store/storetest"
)

// crashChildEnv names the store file a re-executed test binary writes to
// as the crash test's child.
const crashChildEnv = "CORRAL_STORE_CRASH_CHILD"

// TestCrashChild is the child of TestCrashKeepsAcknowledgedWrites: it
// writes to the store from several goroutines, printing a line for every
// write the store acknowledged, until it is killed. It does nothing in an
// ordinary test run.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashChildEnv)
	if path == "" {
		t.Skip("the crash test's child; runs only when started by it")
	}
	s, err := Open(context.Background(), path)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	var out sync.Mutex
	ack := func(format string, args ...any) {
		out.Lock()
		fmt.Printf(format+"\n", args...)
		out.Unlock()
	}
	fail := func(err error) {
		ack("error %v", err)
		os.Exit(2)
	}
	prefix := strconv.Itoa(os.Getpid())
	ctx := context.Background()
	for w := range 16 {
		go func() {
			for i := 0; ; i++ {
				sb := storetest.NewSandbox(fmt.Sprintf("%s-%d-%d", prefix, w, i), storetest.T0)
				if _, _, err := s.CreateSandbox(ctx, sb, storetest.NewOp(sb.ID, sandbox.OpCreate, "child", storetest.T0)); err != nil {
					fail(err)
				}
				ack("sandbox %s", sb.ID)
				op := storetest.NewOp(sb.ID, sandbox.OpDriverCreate, "child", storetest.T0)
				if err := s.PutOperation(ctx, op); err != nil {
					fail(err)
				}
				ack("op %s %d %s", sb.ID, op.ID, op.State)
				op.State, op.FinishedAt = sandbox.OpSucceeded, storetest.T0
				if err := s.PutOperation(ctx, op); err != nil {
					fail(err)
				}
				ack("op %s %d %s", sb.ID, op.ID, op.State)
			}
		}()
	}
	select {} // until killed
}

// Every write the store acknowledged is in the file after the process that
// made it was SIGKILLed at a random moment right after an acknowledgement:
// real processes, a real file, a real SIGKILL, several rounds on one store.
func TestCrashKeepsAcknowledgedWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills child processes")
	}
	path := filepath.Join(t.TempDir(), "corral.db")
	sandboxes := map[string]bool{}
	opStates := map[string]sandbox.OpState{} // "sandbox id/op id" -> the last acknowledged state
	for round := range 6 {
		killAfter := 1 + rand.IntN(400)
		acks := crashChild(t, path, killAfter)
		if len(acks) < killAfter {
			t.Fatalf("round %d: the child acknowledged %d writes and died before the kill after %d", round, len(acks), killAfter)
		}
		for _, line := range acks {
			f := strings.Fields(line)
			switch {
			case len(f) == 2 && f[0] == "sandbox":
				sandboxes[f[1]] = true
			case len(f) == 4 && f[0] == "op":
				key := f[1] + "/" + f[2]
				if opStates[key] != sandbox.OpSucceeded {
					opStates[key] = sandbox.OpState(f[3])
				}
			default:
				t.Fatalf("round %d: child said %q", round, line)
			}
		}
		checkAcknowledged(t, path, sandboxes, opStates)
		t.Logf("round %d: killed after %d acknowledgements (%d printed); %d sandboxes and %d journal entries acknowledged so far, all present",
			round, killAfter, len(acks), len(sandboxes), len(opStates))
	}
}

// crashChild runs the child on the store at path, SIGKILLs it as soon as
// it has printed killAfter acknowledgements, and returns every one it
// printed (some may follow the kill's own, still in the pipe).
func crashChild(t *testing.T, path string, killAfter int) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() }) // a child that hangs
	defer timer.Stop()
	var acks []string
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		line := lines.Text()
		if !strings.HasPrefix(line, "sandbox ") && !strings.HasPrefix(line, "op ") {
			if strings.HasPrefix(line, "error") || strings.HasPrefix(line, "open:") {
				t.Fatalf("child: %s", line)
			}
			continue // the test binary's own output
		}
		acks = append(acks, line)
		if len(acks) == killAfter {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, not by the SIGKILL", err)
	}
	return acks
}

// checkAcknowledged opens the store at path and fails the test for every
// acknowledged write that is not there.
func checkAcknowledged(t *testing.T, path string, sandboxes map[string]bool, opStates map[string]sandbox.OpState) {
	t.Helper()
	s, err := Open(testCtx(t), path)
	if err != nil {
		t.Fatalf("reopen after the kill: %v", err)
	}
	defer s.Close()
	if err := s.IntegrityCheck(testCtx(t)); err != nil {
		t.Fatalf("integrity check after the kill: %v", err)
	}
	stored := map[string]sandbox.OpState{}
	missing := 0
	for id := range sandboxes {
		list, err := s.ListOperations(testCtx(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetSandbox(testCtx(t), id); err != nil {
			missing++
			t.Errorf("acknowledged sandbox %s: %v", id, err)
		}
		for _, o := range list {
			stored[o.SandboxID+"/"+strconv.FormatInt(o.ID, 10)] = o.State
		}
	}
	for key, state := range opStates {
		got, ok := stored[key]
		switch {
		case !ok:
			missing++
			t.Errorf("acknowledged journal entry %s (%s) is missing", key, state)
		case state == sandbox.OpSucceeded && got != sandbox.OpSucceeded:
			missing++
			t.Errorf("journal entry %s is %s, but succeeded was acknowledged", key, got)
		}
	}
	if missing > 0 {
		t.Fatalf("%d acknowledged writes lost", missing)
	}
}
