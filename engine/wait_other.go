//go:build !linux

package engine

import "time"

// osYield is a no-op where the engine has no portable sched_yield; the waits still back off to
// sleeps, which let other processes run.
func osYield() {}

// monoNow is the wall clock in nanoseconds where the engine has no shared monotonic clock: the
// watchdog's beats are compared across processes.
func monoNow() int64 { return time.Now().UnixNano() }
