//go:build !linux

package plugin

import (
	"os"
	"syscall"
)

// groupAttr: outside Linux the plugin runs in the host's process group, and only the plugin
// process itself is killed.
const groupKill = false

func groupAttr() *syscall.SysProcAttr { return nil }

func killGroup(p *os.Process) { _ = p.Kill() }

// waitExit returns at once: the reap (cmd.Wait) then waits for the exit itself, and nothing is
// killed after it (groupKill is false).
func waitExit(int) {}
