package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"gopkg.in/yaml.v3"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// sandboxView is the JSON and YAML form of a sandbox: the field names are
// a contract for scripts.
type sandboxView struct {
	ID            string            `json:"id" yaml:"id"`
	Name          string            `json:"name" yaml:"name"`
	Tenant        string            `json:"tenant" yaml:"tenant"`
	Phase         string            `json:"phase" yaml:"phase"`
	DesiredState  string            `json:"desired_state" yaml:"desired_state"`
	PauseMemory   bool              `json:"pause_memory,omitempty" yaml:"pause_memory,omitempty"`
	Generation    int64             `json:"generation" yaml:"generation"`
	Reason        string            `json:"reason" yaml:"reason"`
	CreatedAt     string            `json:"created_at" yaml:"created_at"`
	UpdatedAt     string            `json:"updated_at" yaml:"updated_at"`
	Deadline      string            `json:"deadline" yaml:"deadline"`
	Image         string            `json:"image,omitempty" yaml:"image,omitempty"`
	Command       []string          `json:"command,omitempty" yaml:"command,omitempty"`
	Labels        map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	Policy        string            `json:"policy,omitempty" yaml:"policy,omitempty"`
	RestartPolicy string            `json:"restart_policy" yaml:"restart_policy"`
	MaxRestarts   int32             `json:"max_restarts" yaml:"max_restarts"`
	Restarts      int32             `json:"restarts" yaml:"restarts"`
	ExitCode      *int32            `json:"exit_code,omitempty" yaml:"exit_code,omitempty"`
	// Protections is what of the policy protects the running main process
	// (get only).
	Protections string `json:"protections,omitempty" yaml:"protections,omitempty"`
	// Network is the egress rules in force (get only).
	Network       string         `json:"network,omitempty" yaml:"network,omitempty"`
	LastOperation *operationView `json:"last_operation" yaml:"last_operation"`
}

// operationView is the JSON and YAML form of a journal entry.
type operationView struct {
	ID         int64  `json:"id" yaml:"id"`
	Kind       string `json:"kind" yaml:"kind"`
	State      string `json:"state" yaml:"state"`
	Attempt    int32  `json:"attempt" yaml:"attempt"`
	Generation int64  `json:"generation" yaml:"generation"`
	Owner      string `json:"owner" yaml:"owner"`
	Epoch      int64  `json:"epoch,omitempty" yaml:"epoch,omitempty"`
	StartedAt  string `json:"started_at" yaml:"started_at"`
	Deadline   string `json:"deadline" yaml:"deadline"`
	FinishedAt string `json:"finished_at,omitempty" yaml:"finished_at,omitempty"`
	Error      string `json:"error,omitempty" yaml:"error,omitempty"`
	Detail     string `json:"detail,omitempty" yaml:"detail,omitempty"`
	// Actor is who asked for a request: name, tenant and role.
	Actor string `json:"actor,omitempty" yaml:"actor,omitempty"`
}

func stamp(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().UTC().Format(time.RFC3339Nano)
}

func viewOf(sb *corralv1.Sandbox) sandboxView {
	return sandboxView{
		ID: sb.Id, Name: sb.Name, Tenant: sb.Tenant, Phase: sb.Phase, DesiredState: sb.DesiredState, PauseMemory: sb.PauseMemory, Generation: sb.Generation,
		Reason: sb.Reason, CreatedAt: stamp(sb.CreatedAt), UpdatedAt: stamp(sb.UpdatedAt), Deadline: stamp(sb.Deadline),
		Image: sb.GetSpec().GetImage(), Command: sb.GetSpec().GetCommand(), Labels: sb.GetSpec().GetLabels(),
		Policy: sb.GetSpec().GetPolicy(), RestartPolicy: sb.GetSpec().GetRestartPolicy(),
		MaxRestarts: sb.GetSpec().GetMaxRestarts(), Restarts: sb.Restarts, ExitCode: sb.ExitCode,
		Protections: sb.Protections, Network: sb.Network, LastOperation: opViewOf(sb.LastOperation),
	}
}

func opViewOf(op *corralv1.Operation) *operationView {
	if op == nil {
		return nil
	}
	return &operationView{
		ID: op.Id, Kind: op.Kind, State: op.State, Attempt: op.Attempt, Generation: op.Generation, Owner: op.Owner,
		StartedAt: stamp(op.StartedAt), Deadline: stamp(op.Deadline), FinishedAt: stamp(op.FinishedAt),
		Error: op.Error, Detail: op.Detail, Actor: op.Actor, Epoch: op.Epoch,
	}
}

// checkFormat rejects an -o value other than table, json and yaml.
func checkFormat(format string) error {
	switch format {
	case "table", "json", "yaml":
		return nil
	}
	return fmt.Errorf("-o %q: want table, json or yaml", format)
}

// printStructured writes v as JSON or YAML; it reports false for table.
func printStructured(w io.Writer, format string, v any) (bool, error) {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return true, enc.Encode(v)
	case "yaml":
		return true, yaml.NewEncoder(w).Encode(v)
	}
	return false, nil
}

// printSandboxes is the table of sandboxes; a TENANT column leads it
// when they are of more than one tenant (an admin's list).
func printSandboxes(w io.Writer, list []*corralv1.Sandbox) error {
	tenants := slices.ContainsFunc(list, func(sb *corralv1.Sandbox) bool { return sb.Tenant != list[0].Tenant })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if tenants {
		fmt.Fprint(tw, "TENANT\t")
	}
	fmt.Fprintln(tw, "NAME\tID\tPHASE\tDESIRED\tGEN\tAGE\tREASON")
	for _, sb := range list {
		if tenants {
			fmt.Fprintf(tw, "%s\t", sb.Tenant)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", sb.Name, sandbox.ShortID(sb.Id), sb.Phase, sb.DesiredState,
			sb.Generation, age(sb.CreatedAt), oneLine(sb.Reason))
	}
	return tw.Flush()
}

func printOperations(w io.Writer, ops []*corralv1.Operation) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tSTATE\tATTEMPT\tGEN\tSTARTED\tDEADLINE\tTOOK\tBY\tERROR")
	for _, op := range ops {
		took := "-"
		if op.FinishedAt != nil {
			took = op.FinishedAt.AsTime().Sub(op.StartedAt.AsTime()).Round(time.Millisecond).String()
		}
		by := "-" // the gateway's own entries: driver calls
		if op.Actor != "" {
			by = printableText(op.Actor)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", op.Id, op.Kind, op.State, op.Attempt, op.Generation,
			clock(op.StartedAt), clock(op.Deadline), took, by, oneLine(op.Error))
	}
	return tw.Flush()
}

func clock(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().Local().Format("15:04:05.000")
}

func age(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	d := time.Since(t.AsTime())
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// printPools is the table of pools.
func printPools(w io.Writer, list []*corralv1.Pool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSIZE\tREADY\tIMAGE\tCOMMAND")
	for _, p := range list {
		image := p.Spec.GetImage()
		if image == "" {
			image = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", p.Name, p.Size, p.Ready, printableText(image),
			printableText(strings.Join(p.Spec.GetCommand(), " ")))
	}
	return tw.Flush()
}
