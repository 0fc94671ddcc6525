//go:build unix && !linux

package launch

import "syscall"

// rankProcAttr: without PR_SET_PDEATHSIG, ranks of a launcher that dies are left to the
// communicator's own failure paths (see launch_linux.go).
func rankProcAttr() *syscall.SysProcAttr { return nil }
