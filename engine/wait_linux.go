//go:build linux

package engine

import "syscall"

// osYield gives this OS thread's core to another runnable thread, of any process (sched_yield).
// runtime.Gosched only switches among this process's goroutines: with ranks as processes and
// more ranks than cores, the rank being waited for may be another process on this core.
func osYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
