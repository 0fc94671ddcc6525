//go:build !amd64 || race

package wire

import "sync/atomic"

// StoreRelease publishes v at *p after every memory access before it in program order. Off
// amd64 an ordinary store is not a release (arm64 needs STLR), and the race build must see the
// in-process transport's handshakes: both use the atomic store.
func StoreRelease(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
