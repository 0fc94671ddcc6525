//go:build race

package wire

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// Race-detector annotations (see raceHidden in engine/comm.go). The race runtime ignores atomic
// operations on memory outside the Go heap and data segments, so on a transport whose regions are
// mapped files (ShmTransport) it sees none of the head, tail and flag handshakes, even between
// goroutines of one process, and none of the ordering that runs through other processes at all.
// Where the engine itself relies on such an ordering between two of its goroutines (the in-place
// Tree AllReduce: broadcast-down writes chunk k where reduce-up read it, after the sum of chunk k
// came back from the root), it states the edge with these calls.
const RaceEnabled = true

func RaceReleaseMerge(p unsafe.Pointer) { runtime.RaceReleaseMerge(p) }
func RaceAcquire(p unsafe.Pointer)      { runtime.RaceAcquire(p) }

// StoreLL stores one LL half-line. The race build uses an atomic store, so that the detector sees
// the in-process transport's LL handshake (see norace.go).
func StoreLL(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
