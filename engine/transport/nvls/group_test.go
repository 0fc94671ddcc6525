package nvls

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/kernels"
)

// TestGroup runs the switch's operations on a 3-member region of 8-byte steps (2 int32 per head):
// member m's up slot of step 9 (slot 9 mod 8 = 1) holds m+1 and 10(m+1) at byte 8 (head 1's
// share); LdReduce with sum gives 1+2+3 = 6 and 10+20+30 = 60 (hand sums), St puts those 8 bytes
// into every member's down slot of step 9 at byte 8 and nothing else; the counters NewGroup binds
// are the region's words at CounterOffset, and Behind names the first member below a value by its
// rank (member 0 is rank 6).
func TestGroup(t *testing.T) {
	l := Layout{Members: 3, StepBytes: 8}
	r := make([]byte, l.Size()+8) // 8-byte aligned backing for the counters
	off := int(uintptrAlign(r))
	r = r[off : off+l.Size()]
	g := NewGroup(r, l, 1, 6)
	const s, at = 9, 8
	for m := 0; m < 3; m++ {
		slot := g.SlotAt(s, m, false, at, 8)
		binary.LittleEndian.PutUint32(slot, uint32(m+1))
		binary.LittleEndian.PutUint32(slot[4:], uint32(10*(m+1)))
	}
	red, err := kernels.NewReducer(kernels.Int32, kernels.Sum, 3, nil)
	require.NoError(t, err)
	dst := make([]byte, 8)
	g.LdReduce(red, s, dst, at)
	assert.Equal(t, uint32(6), binary.LittleEndian.Uint32(dst))
	assert.Equal(t, uint32(60), binary.LittleEndian.Uint32(dst[4:]))

	g.St(s, dst, at)
	for m := 0; m < 3; m++ {
		down := r[l.DownOffset(m) : l.DownOffset(m)+l.BufferBytes()]
		want := make([]byte, l.BufferBytes())
		copy(want[1*l.SlotBytes()+at:], dst)
		assert.Equal(t, want, down, "member %d's down buffer", m)
	}

	*g.Posted[0], *g.Posted[1], *g.Posted[2] = 5, 5, 4
	assert.Equal(t, uint64(4), binary.LittleEndian.Uint64(r[l.CounterOffset(2, Posted):]), "Posted[2] is the region's word")
	assert.Equal(t, 8, g.Behind(g.Posted, 5), "member 2 (rank 6+2) is behind")
	assert.Equal(t, -1, g.Behind(g.Posted, 4))
	assert.Equal(t, 6, g.Behind(g.Done, 1), "no member is done: member 0 first")
}

// uintptrAlign returns how many bytes into b an 8-byte aligned address starts.
func uintptrAlign(b []byte) uintptr {
	p := uintptr(unsafe.Pointer(&b[0]))
	return (8 - p%8) % 8
}
