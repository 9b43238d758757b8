package lifecycle

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// The bounds on what a request may carry. Every driver gets them: they are
// checked before anything is recorded, so a record never holds what no
// driver could run or what would make every list of sandboxes heavy.
const (
	// MaxLabels is the most labels a sandbox may have.
	MaxLabels = 64
	// MaxLabelKeyBytes is the longest label key (a DNS subdomain's length).
	MaxLabelKeyBytes = 253
	// MaxLabelValueBytes is the longest label value.
	MaxLabelValueBytes = 256
	// MaxCommandArgs is the most arguments a command may have.
	MaxCommandArgs = 1024
	// MaxCommandBytes bounds a command's arguments in all, each counted
	// with the NUL that ends it, as execve counts them.
	MaxCommandBytes = 128 << 10
	// MaxImageBytes is the longest image string.
	MaxImageBytes = 4096
	// MaxRequestIDBytes is the longest create request id.
	MaxRequestIDBytes = 256
	// MaxPolicyBytes is the largest policy text.
	MaxPolicyBytes = 256 << 10
)

// labelKeyRE is a label key's charset: letters, digits, '.', '_', '-' and
// '/', starting and ending with a letter or digit (team,
// com.example.owner, example.com/tier).
var labelKeyRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?$`)

// validateInput checks the generic bounds of a create: request id, labels,
// command, image and policy size. The driver's own checks come after.
func validateInput(name, requestID string, spec sandbox.Spec) error {
	if err := validateRequestID(name, requestID); err != nil {
		return err
	}
	if err := validateLabels(name, spec.Labels); err != nil {
		return err
	}
	if err := ValidateCommand(name, "command", spec.Command); err != nil {
		return err
	}
	if err := validateImage(name, spec.Image); err != nil {
		return err
	}
	if err := validateHosts(name, spec.Hosts); err != nil {
		return err
	}
	return validatePolicySize(name, spec.Policy)
}

// maxHosts bounds a spec's add_hosts.
const maxHosts = 256

// hostNameRE is a host name as add_hosts takes it: lower-case labels.
var hostNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)

// validateHosts checks add_hosts: at most maxHosts "NAME:IP" pins.
func validateHosts(name string, hosts []string) error {
	if len(hosts) > maxHosts {
		return errdefs.InvalidArgument("sandbox %q: %d add_hosts; at most %d", name, len(hosts), maxHosts)
	}
	for _, h := range hosts {
		if err := printable(name, "add_host", h); err != nil {
			return err
		}
		host, ip, ok := strings.Cut(h, ":")
		if _, err := netip.ParseAddr(ip); !ok || err != nil || len(host) > 253 || !hostNameRE.MatchString(host) {
			return errdefs.InvalidArgument("sandbox %q: add_host %q: want NAME:IP, a lower-case host name and an IP address", name, h)
		}
	}
	return nil
}

func validateRequestID(name, id string) error {
	if len(id) > MaxRequestIDBytes {
		return invalid(name, "request id", "%d bytes, more than %d", len(id), MaxRequestIDBytes)
	}
	return printable(name, "request id", id)
}

func validateLabels(name string, labels map[string]string) error {
	if len(labels) > MaxLabels {
		return invalid(name, "labels", "%d labels, more than %d", len(labels), MaxLabels)
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first bad one in order, so the message is stable
	for _, k := range keys {
		field := "label key " + quote(k)
		switch {
		case k == "" || len(k) > MaxLabelKeyBytes:
			return invalid(name, field, "it must be 1 to %d bytes", MaxLabelKeyBytes)
		case strings.HasPrefix(k, "corral."):
			return invalid(name, field, "the corral. prefix is reserved")
		case !labelKeyRE.MatchString(k):
			return invalid(name, field, "use letters, digits, '.', '_', '-' and '/', starting and ending with a letter or digit")
		}
		v := labels[k]
		field = "label " + quote(k)
		if len(v) > MaxLabelValueBytes {
			return invalid(name, field, "value is %d bytes, more than %d", len(v), MaxLabelValueBytes)
		}
		if err := printable(name, field+" value", v); err != nil {
			return err
		}
	}
	return nil
}

// ValidateCommand checks a command line of sandbox name (a main command,
// an exec, a file operation's) against the input bounds: what execve can
// take. An empty command is left to the caller (create runs the image's
// own).
func ValidateCommand(name, field string, command []string) error {
	if len(command) > MaxCommandArgs {
		return invalid(name, field, "%d arguments, more than %d", len(command), MaxCommandArgs)
	}
	total := 0
	for _, arg := range command {
		total += len(arg) + 1
	}
	if total > MaxCommandBytes {
		return invalid(name, field, "%d bytes in all, more than %d (128 KiB)", total, MaxCommandBytes)
	}
	if len(command) > 0 && command[0] == "" {
		return invalid(name, field, "the first argument, the program to run, is empty")
	}
	for i, arg := range command {
		switch {
		case strings.IndexByte(arg, 0) >= 0:
			return invalid(name, field, "argument %d contains a NUL byte, which no program can be given", i+1)
		case !utf8.ValidString(arg):
			return invalid(name, field, "argument %d is not valid UTF-8", i+1)
		}
	}
	return nil
}

// validateImage is the byte-level check of an image string; what it means
// (a Docker reference, a directory) is the driver's to check.
func validateImage(name, image string) error {
	if field, why := imageProblem(image); why != "" {
		return invalid(name, field, "%s", why)
	}
	return nil
}

// ValidateImage is the byte-level check of an image named outside a
// sandbox's spec (an image call): errdefs.ErrInvalidArgument naming it.
func ValidateImage(image string) error {
	if field, why := imageProblem(image); why != "" {
		return errdefs.InvalidArgument("%s: %s", field, why)
	}
	return nil
}

// imageProblem says what is wrong with an image string at the byte level,
// and names the field: "" when nothing is.
func imageProblem(image string) (field, why string) {
	field = "image " + quote(image)
	if len(image) > MaxImageBytes {
		return "image", fmt.Sprintf("%d bytes, more than %d", len(image), MaxImageBytes)
	}
	if !utf8.ValidString(image) {
		return field, "not valid UTF-8"
	}
	for i, r := range image {
		switch {
		case unicode.IsControl(r):
			return field, fmt.Sprintf("a control character at byte %d", i)
		case unicode.IsSpace(r):
			return field, fmt.Sprintf("white space at byte %d", i)
		}
	}
	return field, ""
}

func validatePolicySize(name, text string) error {
	if len(text) > MaxPolicyBytes {
		return invalid(name, "policy", "%d bytes, more than %d (256 KiB)", len(text), MaxPolicyBytes)
	}
	return nil
}

// printable refuses invalid UTF-8 and control characters (NUL, newlines,
// escapes) in a one-line string.
func printable(name, field, s string) error {
	if !utf8.ValidString(s) {
		return invalid(name, field, "not valid UTF-8")
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return invalid(name, field, "a control character at byte %d", i)
		}
	}
	return nil
}

// invalid is the one-line error of an invalid field of a sandbox's request.
func invalid(name, field, format string, args ...any) error {
	return errdefs.InvalidArgument("sandbox %s: %s: %s", quote(name), field, fmt.Sprintf(format, args...))
}

// quote quotes s for a message, cut to a readable length: an error must
// not echo a megabyte back.
func quote(s string) string {
	const max = 64
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q...", s[:cut])
}
