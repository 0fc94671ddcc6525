//go:build amd64 && !race

package wire

// StoreRelease publishes v at *p after every memory access before it in program order (the head,
// tail, LL128 flag and descriptor sequence words). On amd64 an ordinary MOV already is a release
// store: the hardware keeps stores in order and never moves a store above an earlier load, and
// Go's compiler keeps memory operations on one memory chain in program order. atomic.StoreUint64
// is an XCHG, which also waits until this core owns the line, a cross-core transfer whenever the
// peer read it since; a MOV leaves that to the store buffer. Measured on 2 cores, 4 rank
// processes, LL all-reduce of 8-512 B: see docs/engine-vs-mpi.md, sixth run.
func StoreRelease(p *uint64, v uint64) { *p = v }
