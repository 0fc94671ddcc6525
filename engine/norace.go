//go:build !race

package engine

import "unsafe"

// Without the race detector the annotations of race.go are no-ops.
const raceEnabled = false

func raceReleaseMerge(unsafe.Pointer) {}
func raceAcquire(unsafe.Pointer)      {}
