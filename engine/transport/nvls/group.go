package nvls

import (
	"sync/atomic"

	"github.com/collplan/collplan/engine/internal/prims"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/kernels"
)

// Group is one rank's view of one channel's multicast object: the member buffers and counters of a
// mapped region, with the switch's two operations, LdReduce and St. On CPU the rank that issues
// LdReduce does the adds the switch would do, reading every member's buffer; St is one copy per
// member. The kernel that drives it (engine/nvls.go) reads and writes the fields directly: they
// are the per-step path.
type Group struct {
	L       Layout
	Me      int       // this rank's member index (its local rank in the node)
	Rank0   int       // the rank of member 0
	Up, Dn  [][]byte  // per member: the whole up and down buffers
	Posted  []*uint64 // per member: the Posted counters
	Reduced []*uint64 // per member: the Reduced counters
	Done    []*uint64 // per member: the Done counters
	Step    uint64    // this rank's next step (the same on every member)
}

// NewGroup returns member me's view of region r laid out as l, whose member 0 is rank rank0.
func NewGroup(r []byte, l Layout, me, rank0 int) *Group {
	g := &Group{L: l, Me: me, Rank0: rank0}
	for m := 0; m < l.Members; m++ {
		g.Up = append(g.Up, r[l.UpOffset(m):l.UpOffset(m)+l.BufferBytes()])
		g.Dn = append(g.Dn, r[l.DownOffset(m):l.DownOffset(m)+l.BufferBytes()])
		g.Posted = append(g.Posted, wire.WordAt(r, l.CounterOffset(m, Posted)))
		g.Reduced = append(g.Reduced, wire.WordAt(r, l.CounterOffset(m, Reduced)))
		g.Done = append(g.Done, wire.WordAt(r, l.CounterOffset(m, Done)))
	}
	return g
}

// SlotAt returns bytes [off, off+nb) of member m's up (down when dn) slot of step s.
func (g *Group) SlotAt(s uint64, m int, dn bool, off, nb int) []byte {
	o := int(s%wire.NCCLSteps)*g.L.SlotBytes() + off
	if dn {
		return g.Dn[m][o : o+nb : o+nb]
	}
	return g.Up[m][o : o+nb : o+nb]
}

// LdReduce stores into dst the reduction with red of bytes [off, off+len(dst)) of step s's up
// slots across every member: multimem.ld_reduce, with this rank doing the switch's adds.
func (g *Group) LdReduce(red kernels.Reducer, s uint64, dst []byte, off int) {
	nb := len(dst)
	if nb == 0 {
		return
	}
	if g.L.Members == 1 {
		copy(dst, g.SlotAt(s, 0, false, off, nb))
		return
	}
	red.Reduce(dst, g.SlotAt(s, 0, false, off, nb), g.SlotAt(s, 1, false, off, nb))
	for m := 2; m < g.L.Members; m++ {
		red.Reduce(dst, dst, g.SlotAt(s, m, false, off, nb))
	}
}

// St writes data into bytes [off, off+len(data)) of step s's down slot of every member:
// multimem.st. (A member whose slot is data already is skipped.)
func (g *Group) St(s uint64, data []byte, off int) {
	for m := 0; m < g.L.Members; m++ {
		if d := g.SlotAt(s, m, true, off, len(data)); !prims.SameBytes(d, data) {
			copy(d, data)
		}
	}
}

// Behind returns the rank of a member whose counter in ctr (one of Posted, Reduced, Done) is
// below v, or -1 when none is.
func (g *Group) Behind(ctr []*uint64, v uint64) int {
	for m, p := range ctr {
		if atomic.LoadUint64(p) < v {
			return g.Rank0 + m
		}
	}
	return -1
}
