//go:build linux

package engine

import "syscall"

// gettid is the calling thread's id, the third field of NCCL's log prefix.
func gettid() int { return syscall.Gettid() }
