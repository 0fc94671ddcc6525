package emuhost

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
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

// WriteRshAgent writes an executable shell script at path that Open MPI's mpirun can use as its
// rsh agent (`--mca plm_rsh_agent PATH`) to start its daemons on the lab's hosts: called as
// `AGENT HOST COMMAND...`, it runs COMMAND in the namespaces of the host whose hostname is HOST,
// where ssh would log in on a real machine. Run mpirun itself on one host (Command), with a
// hostfile of the lab's hostnames, and keep its own traffic on the lab's bridge
// (`--mca oob_tcp_if_include eth0 --mca btl_tcp_if_include eth0`): the machine's namespace has no
// route to the hosts.
func (l *Lab) WriteRshAgent(path string) error {
	if l.closed.Load() {
		return fmt.Errorf("emuhost: rsh agent: lab %s is closed", l.rec.Lab)
	}
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# mpirun's rsh agent for emulated hosts (emuhost.Lab.WriteRshAgent)\nhost=$1\nshift\ncase $host in\n")
	for h := range l.spec.Hosts {
		args := l.Command(context.Background(), h, "/bin/sh", "-c").Args
		q := make([]string, len(args))
		for i, a := range args {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		fmt.Fprintf(&b, "%s) exec %s \"$*\" ;;\n", l.Hostname(h), strings.Join(q, " "))
	}
	b.WriteString("*) echo \"emuhost rsh agent: unknown host $host\" >&2; exit 1 ;;\nesac\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o755); err != nil {
		return fmt.Errorf("emuhost: rsh agent: %w", err)
	}
	return nil
}
