//go:build !race

package wire

import "unsafe"

// Without the race detector the annotations of race.go are no-ops.
const RaceEnabled = false

func RaceReleaseMerge(unsafe.Pointer) {}
func RaceAcquire(unsafe.Pointer)      {}

// StoreLL stores one LL half-line {data, flag} with a plain 8-byte store: one MOV on amd64 and
// arm64, which hardware never tears for an aligned word, and which Go's memory model also
// guarantees is observed whole (a racy read of at most a machine word sees some write). An LL half
// needs nothing more: it carries its own flag, so the receiver never depends on the order of two
// stores. atomic.StoreUint64 would be an XCHG on amd64, a full fence costing about 20 cycles per
// half-line (measured in one run, 2 in-process ranks, LL AllReduce: 3.7 against 1.6 us at 512 B,
// 8.0 against 3.5 us at 4 KiB; go test -run x -bench AllReduce/ranks=2/LL/ ./engine).
func StoreLL(p *uint64, v uint64) { *p = v }
