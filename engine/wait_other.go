//go:build !linux

package engine

// osYield is a no-op where the engine has no portable sched_yield; the waits still back off to
// sleeps, which let other processes run.
func osYield() {}
