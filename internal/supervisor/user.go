package supervisor

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/corral-sandbox/corral/internal/policy"
)

// ImageUserEnv carries an image's user by name to a supervisor that runs
// inside the image (Docker's PID 1), which resolves it from the image's
// own /etc/passwd when the policy names no run_as_user.
const ImageUserEnv = "CORRAL_IMAGE_USER"

// ResolveUser returns the uid a sandbox runs as for an image's user
// ("name", "uid", "name:group" or "uid:gid", as an image config's User
// says it), looking a name up in passwd (the image's /etc/passwd). Root is
// policy.DefaultUser, as no user is: only a policy's run_as_user: 0 asks
// for root. Processes run with the uid as their group too, as run_as_user
// says; the group part is not used.
func ResolveUser(user string, passwd []byte) (int, error) {
	uid, err := lookupUser(user, passwd)
	if uid == 0 {
		uid = policy.DefaultUser
	}
	return uid, err
}

func lookupUser(user string, passwd []byte) (int, error) {
	name, _, _ := strings.Cut(user, ":")
	if name == "" {
		return 0, fmt.Errorf("image user %q names no user", user)
	}
	if uid, err := strconv.Atoi(name); err == nil {
		if uid < 0 || uid > 65535 {
			return 0, fmt.Errorf("image user %q: uid outside 0…65535", user)
		}
		return uid, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(passwd))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) < 3 || f[0] != name {
			continue
		}
		uid, err := strconv.Atoi(f[2])
		if err != nil || uid < 0 || uid > 65535 {
			return 0, fmt.Errorf("image user %q: /etc/passwd gives it uid %q", user, f[2])
		}
		return uid, nil
	}
	return 0, fmt.Errorf("image user %q is not in the image's /etc/passwd", user)
}
