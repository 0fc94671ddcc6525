package main

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user + system) this rank has used, for -C. A rank process's is the
// process's (getrusage RUSAGE_SELF: every thread, the spinning waiters included); in process the
// ranks are goroutines of one process that cannot be told apart, so each is charged an equal
// share of the process's CPU time.
func (b *bench) cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	t := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if b.transport == "inproc" && b.n > 0 {
		t /= time.Duration(b.n)
	}
	return t
}
