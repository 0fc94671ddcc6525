//go:build !linux

package wire

import "time"

// OSYield is a no-op where the engine has no portable sched_yield; the waits still back off to
// sleeps, which let other processes run.
func OSYield() {}

// MonoNow is the wall clock in nanoseconds where the engine has no shared monotonic clock: the
// watchdog's beats are compared across processes.
func MonoNow() int64 { return time.Now().UnixNano() }
