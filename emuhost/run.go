package emuhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// stepTimeout bounds each command the package runs itself: ip and tc answer in milliseconds, so a
// command still running after 10 s is a hung netlink call or a stuck mount, not a slow machine.
const stepTimeout = 10 * time.Second

// StepError is a failed step of making, changing or removing a lab: the step, the command line it ran
// and the command's stderr.
type StepError struct {
	Step   string // what was being done, e.g. "add bridge cpeh0br"
	Cmd    string // the command line
	Stderr string // the command's stderr, trimmed
	Err    error  // the exit status, the context's error or the exec error
}

func (e *StepError) Error() string {
	msg := fmt.Sprintf("emuhost: %s: %s: %v", e.Step, e.Cmd, e.Err)
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

func (e *StepError) Unwrap() error { return e.Err }

// run runs one command with at most stepTimeout (less when ctx ends first) and returns its stdout.
func run(ctx context.Context, step, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = errors.Join(err, ctx.Err())
		}
		return stdout.String(), &StepError{Step: step, Cmd: name + " " + strings.Join(args, " "),
			Stderr: strings.TrimSpace(stderr.String()), Err: err}
	}
	return stdout.String(), nil
}

// Check reports why labs cannot be made here, or nil: Create needs root (CAP_NET_ADMIN and
// CAP_SYS_ADMIN), ip(8) with network namespaces, tc(8), nsenter(1) and unshare(1). Tests use it
// to skip, or to fail where the environment promises emulated hosts (COLLPLAN_REQUIRE_NETNS=1).
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("emuhost: not root")
	}
	for _, tool := range []string{"ip", "tc", "nsenter", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("emuhost: %s not on PATH", tool)
		}
	}
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil {
		return fmt.Errorf("emuhost: ip netns list: %v: %s", err, out)
	}
	return nil
}
