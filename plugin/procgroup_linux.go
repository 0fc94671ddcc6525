package plugin

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// groupKill: the plugin has a process group of its own, killed whole.
const groupKill = true

// groupAttr starts the plugin as the leader of a new process group (its pgid is its pid).
func groupAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killGroup sends SIGKILL to the plugin's whole process group. One kill(-pgid) reaches every
// member atomically with respect to fork (the kernel delivers it under the task list lock, and a
// fork that races it fails), so a fork bomb inside the group cannot outrun it. The caller makes
// sure the leader is not yet reaped, so the group id is still the plugin's.
func killGroup(p *os.Process) {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.Kill()
	}
}

// waitExit waits until process pid has exited, without reaping it (waitid WNOWAIT): its pid, and
// so its group id, stays reserved until the caller reaps it.
func waitExit(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, syscall.EINTR) {
			return
		}
	}
}
