package transport

import (
	"fmt"
	"strconv"
	"sync"
	"unsafe"

	"github.com/collplan/collplan/engine/internal/wire"
)

// Transport is the seam between the engine and the memory its ranks share. It provides named byte
// regions; everything the ranks exchange (FIFO slots, head and tail counters, the per-call
// handshake, the abort word) lives inside them, as plain bytes and 64-bit words accessed with
// sync/atomic. No Go pointer, Go channel or Go object is ever stored in a region, so a region can be
// a slice of Go memory (NewInProcess) or a file mapped into several processes (a shared-memory
// transport, one rank per process).
//
// The engine asks, from each rank, for the regions that rank touches: "ctrl" (the communicator's
// control words, every rank) and, for each connection, "conn/C/FROM-TO" (channel C, sender rank
// FROM, receiver rank TO; both endpoints ask) and, for NVLS calls, "nvls/NODE/CH" (the multicast
// object of virtual node NODE on channel CH; every member asks). Names are ASCII: letters, digits,
// '/', '-'.
//
// A Transport must guarantee, for every name:
//   - every rank that asks gets the same bytes, of the size asked (all ranks ask for the same size;
//     the engine checks a layout word in each region and reports a disagreement as an error);
//   - the bytes are zero when the first rank gets them, and the region is fresh for each
//     communicator (name regions under a per-communicator prefix);
//   - the region starts at an address aligned to RegionAlign, and stays mapped until that rank's
//     Close;
//   - an aligned 8-byte store by one rank is seen whole by another (single-copy atomicity; any
//     cache-coherent mapping of the same memory on amd64 or arm64 gives it), and the memory is
//     little-endian (the wire formats are defined in little-endian bytes).
//
// Region may be called concurrently by different ranks. The engine calls it from one goroutine
// per rank, outside the data path: once per name at setup or at the first call that needs it.
type Transport interface {
	// Region returns the shared region called name, size bytes long.
	Region(name string, size int) ([]byte, error)
	// Close releases this rank's use of the transport's regions. The engine calls it once, from
	// Comm.Close, after every goroutine of the rank has stopped touching the regions.
	Close() error
}

// RegionAlign is the alignment every region must have: a cache line, as NCCL aligns its FIFOs.
const RegionAlign = wire.RegionAlign

// CtrlRegion is the name of the communicator's control region.
const CtrlRegion = wire.CtrlRegion

// ConnRegion returns the name of the region of the connection from rank from to rank to on channel
// ch: "conn/CH/FROM-TO".
func ConnRegion(ch, from, to int) string {
	b := make([]byte, 0, 24)
	b = append(b, "conn/"...)
	b = strconv.AppendInt(b, int64(ch), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(from), 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(to), 10)
	return string(b)
}

// InProcess is the Transport of the engine's NewInProcess: regions are Go byte slices shared by
// the ranks' goroutines.
type InProcess struct {
	mu      sync.Mutex
	regions map[string][]byte
}

// NewInProcess returns an empty in-process transport.
func NewInProcess() *InProcess { return &InProcess{regions: make(map[string][]byte)} }

// Rank returns one rank's handle on s.
func (s *InProcess) Rank() Rank { return Rank{s} }

// Rank is one rank's handle on an InProcess transport.
type Rank struct{ shared *InProcess }

// Region returns the region called name, made (zeroed, aligned) by the first rank that asks.
func (t Rank) Region(name string, size int) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("engine: region %s: size %d", name, size)
	}
	s := t.shared
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.regions[name]; ok {
		if len(r) != size {
			return nil, fmt.Errorf("engine: region %s: asked for %d bytes, it has %d", name, size, len(r))
		}
		return r, nil
	}
	r := alignedBytes(size)
	s.regions[name] = r
	return r, nil
}

// Close does nothing: the regions are garbage collected once no rank holds them.
func (Rank) Close() error { return nil }

// alignedBytes returns size zeroed bytes starting at a RegionAlign boundary. The backing array is
// allocated as uint64 words so the garbage collector never sees the region as holding pointers.
func alignedBytes(size int) []byte {
	words := make([]uint64, (size+2*RegionAlign)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*8)
	off := 0
	if rem := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) % RegionAlign); rem != 0 {
		off = RegionAlign - rem
	}
	return b[off : off+size : off+size]
}
