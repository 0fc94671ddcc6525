package emuhost

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Command returns a command that runs name with args on host: in the host's network namespace and in
// its UTS, IPC and mount namespaces (its hostname, System V IPC, /dev/shm and /etc/hosts), and in the
// caller's working directory (or cmd.Dir); nothing else changes (same file systems, users,
// environment). The process is `nsenter --net=... --uts=... --ipc=... --mount=... --wd=. -- name
// args...`, which enters the namespaces and execs name, so cmd.Process is name's own process.
//
// It is nsenter into a per-host holder process's namespaces rather than a Go re-exec helper, since
// it runs any program (mpirun, a shell, a binary without this package's init hook), and since a Go
// process cannot enter a mount namespace once it has more than one thread; and rather than a fresh
// `unshare --mount` per command, since the processes of one host (ranks that share memory) must see one
// /dev/shm.
//
// The command runs in its own process group; when ctx ends, the whole group is killed (SIGKILL), so
// nothing it started is left (cmd.Process.Kill signals the program alone; syscall.Kill(-pid, sig)
// signals the group). Start fails when host is out of range or the lab is closed.
func (l *Lab) Command(ctx context.Context, host int, name string, args ...string) *exec.Cmd {
	var argv []string
	if host >= 0 && host < l.spec.Hosts && !l.closed.Load() {
		holder := strconv.Itoa(l.holders[host].cmd.Process.Pid)
		argv = []string{"--net=/run/netns/" + l.rec.Netns[host], "--uts=/proc/" + holder + "/ns/uts",
			"--ipc=/proc/" + holder + "/ns/ipc", "--mount=/proc/" + holder + "/ns/mnt", "--wd=.", "--", name}
	}
	cmd := exec.CommandContext(ctx, "nsenter", append(argv, args...)...)
	switch {
	case host < 0 || host >= l.spec.Hosts:
		cmd.Err = fmt.Errorf("emuhost: command %s: host %d of a lab of %d hosts", name, host, l.spec.Hosts)
	case l.closed.Load():
		cmd.Err = fmt.Errorf("emuhost: command %s: lab %s is closed", name, l.rec.Lab)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// After the kill, Wait gives the group's pipes this long to close (a grandchild that escaped the
	// group could hold them).
	cmd.WaitDelay = 2 * time.Second
	return cmd
}
