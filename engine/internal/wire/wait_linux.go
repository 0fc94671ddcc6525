//go:build linux

package wire

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// OSYield gives this OS thread's core to another runnable thread, of any process (sched_yield).
// runtime.Gosched only switches among this process's goroutines: with ranks as processes and
// more ranks than cores, the rank being waited for may be another process on this core.
func OSYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// MonoNow is CLOCK_MONOTONIC in nanoseconds: one clock for every process of the host, so that a
// rank can judge the age of another's beat (the watchdog).
func MonoNow() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return Nanotime()
	}
	return ts.Nano()
}
