package cuda

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/kernels"
)

var testBuffers = ConnBuffers{LL: 8 * 16 * 4, LL128: 8 * 128 * 2, Simple: 8 * 1024}

// TestPieceBytes: an LL slot of 4 lines carries 4 x 8 bytes, an LL128 slot of 2 lines 2 x 120, a
// Simple slot its 1024 bytes; the region is 3 lines then the three buffers.
func TestPieceBytes(t *testing.T) {
	assert.Equal(t, 32, testBuffers.PieceBytes(ProtoLL))
	assert.Equal(t, 240, testBuffers.PieceBytes(ProtoLL128))
	assert.Equal(t, 1024, testBuffers.PieceBytes(ProtoSimple))
	assert.Equal(t, 3*128+512+2048+8192, testBuffers.RegionBytes())
}

func TestRingOrder(t *testing.T) {
	assert.Equal(t, []int32{0, 1, 2, 3}, RingOrder(4, 0))
	assert.Equal(t, []int32{0, 3, 2, 1}, RingOrder(4, 1))
	assert.Equal(t, []int32{0, 1, 2, 3}, RingOrder(4, 2))
}

// TestRingWorks: 3 ranks, 2 channels, 100 float32: the channels split the elements at 52 (50
// rounded up to 16 bytes of float32), one Simple slot (256 elements) a chunk; block
// rank*channels+ch; on every channel each rank receives on the region its ring predecessor sends
// on, and the ring position matches the channel's order.
func TestRingWorks(t *testing.T) {
	c := ringCall{n: 3, channels: 2, count: 100, es: 4, proto: ProtoSimple, buffers: testBuffers, devOp: 3,
		opArgs: []uint64{7, 8, 9}, root: 1}
	a := ringAddrs{send: []uint64{100, 101, 102}, recv: []uint64{200, 201, 202}, abort: 5,
		region:   func(ch, from int) uint64 { return uint64(1000 + 10*ch + from) },
		sendStep: func(ch, r int) uint64 { return uint64(2000 + 10*ch + r) },
		recvStep: func(ch, r int) uint64 { return uint64(3000 + 10*ch + r) },
		ring:     func(ch int) uint64 { return uint64(4000 + ch) }}
	ws := ringWorks(c, a)
	require.Len(t, ws, 6)
	type want struct {
		lo, hi     uint64
		ix         uint32
		recvRegion uint64 // the predecessor's send region
	}
	// Channel 0's ring is 0,1,2; channel 1's is 0,2,1 (backwards).
	wants := []want{
		{0, 52, 0, 1002}, {52, 100, 0, 1011}, // rank 0: predecessors 2 (ch 0) and 1 (ch 1)
		{0, 52, 1, 1000}, {52, 100, 2, 1012}, // rank 1: predecessors 0 and 2
		{0, 52, 2, 1001}, {52, 100, 1, 1010}, // rank 2: predecessors 1 and 0
	}
	for b, w := range ws {
		r, ch := b/2, b%2
		assert.Equal(t, wants[b].lo, w.Lo, "block %d lo", b)
		assert.Equal(t, wants[b].hi, w.Hi, "block %d hi", b)
		assert.Equal(t, wants[b].ix, w.RingIx, "block %d ring position", b)
		assert.Equal(t, wants[b].recvRegion, w.RingRecv.Region, "block %d receives from", b)
		assert.Equal(t, uint64(1000+10*ch+r), w.RingSend.Region, "block %d sends on its own region", b)
		assert.Equal(t, uint64(2000+10*ch+r), w.RingSend.Step, "block %d", b)
		assert.Equal(t, uint64(3000+10*ch+r), w.RingRecv.Step, "block %d", b)
		assert.Equal(t, uint64(100+r), w.SendBuff)
		assert.Equal(t, uint64(200+r), w.RecvBuff)
		assert.Equal(t, uint64(4000+ch), w.Ring)
		assert.Equal(t, uint64(7+r), w.OpArg, "each rank its own argument (PreMulSum scalars)")
		assert.Equal(t, uint64(256), w.ChunkElems)
		assert.Equal(t, uint64(1024), w.PieceBytes)
		assert.Equal(t, uint32(3), w.NRanks)
		assert.Equal(t, uint32(1), w.Root)
		assert.Equal(t, uint32(3), w.DevOp)
		assert.Equal(t, uint64(5), w.Abort)
		assert.Equal(t, uint32(8*16*4), w.RingSend.LLBytes)
		assert.Equal(t, uint32(8*1024), w.RingRecv.SimpleBytes)
	}
}

// TestNewCommRefuses: bad configurations are refused before the driver is opened; a good one
// without a driver is ErrNoDriver.
func TestNewCommRefuses(t *testing.T) {
	t.Setenv("COLLPLAN_LIBCUDA", filepath.Join(t.TempDir(), "libcuda.so.1"))
	for _, tc := range []struct {
		cfg  CommConfig
		want string
	}{
		{CommConfig{Ranks: 1, Channels: 1, Buffers: testBuffers}, "1 ranks: want 2 or more"},
		{CommConfig{Ranks: 2, Channels: 0, Buffers: testBuffers}, "0 channels: want 1..64"},
		{CommConfig{Ranks: 2, Channels: 1, Buffers: testBuffers, Threads: 96}, "96 threads per block"},
		{CommConfig{Ranks: 2, Channels: 1, Buffers: ConnBuffers{LL: 100, LL128: 2048, Simple: 8192}}, "LL buffer of 100 bytes: want a positive multiple of 128"},
	} {
		_, err := NewComm(tc.cfg)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
		assert.NotErrorIs(t, err, ErrNoDriver)
	}
	_, err := NewComm(CommConfig{Ranks: 4, Channels: 2, Buffers: testBuffers})
	assert.ErrorIs(t, err, ErrNoDriver)
}

// TestTreeWorks: 4 ranks, 2 channels. NCCL's btree over 4 (ncclGetBtree, worked by hand): rank 0
// is the root with the one child 2 (bit = 4 past the ranks, child bit>>1 = 2); rank 2 (bit 2) has
// parent 0 and children 2-1 = 1 and 2+1 = 3; ranks 1 and 3 (bit 1) have parent (r^1)|2 = 2 and no
// children. Tree 1, for even n, mirrors it (x -> 3-x): root 3, its child 1, whose children are 2
// and 0. Each rank sends up on its own (child, up) region and receives down on its (child, down)
// region; a parent receives from each child's up region and sends on its down region.
func TestTreeWorks(t *testing.T) {
	trees, err := Trees(4)
	require.NoError(t, err)
	c := ringCall{n: 4, channels: 2, count: 64, es: 4, proto: ProtoLL128, buffers: testBuffers, opArgs: make([]uint64, 4)}
	a := treeAddrs{send: make([]uint64, 4), recv: make([]uint64, 4),
		region: func(ch, child, dir int) uint64 { return uint64(10000 + 100*ch + 10*child + dir) },
		step:   func(ch, child, dir, side int) uint64 { return uint64(20000 + 1000*ch + 100*child + 10*dir + side) }}
	ws := treeWorks(c, a, trees)
	require.Len(t, ws, 8)
	for _, tc := range []struct {
		rank, ch int
		up       int // -1: the root
		kids     []int
	}{
		{0, 0, -1, []int{2}}, {2, 0, 0, []int{1, 3}}, {1, 0, 2, nil}, {3, 0, 2, nil},
		{3, 1, -1, []int{1}}, {1, 1, 3, []int{2, 0}}, {2, 1, 1, nil}, {0, 1, 1, nil},
	} {
		w := ws[tc.rank*2+tc.ch]
		name := fmt.Sprintf("rank %d channel %d", tc.rank, tc.ch)
		if tc.up < 0 {
			assert.Zero(t, w.TreeUp, name)
		} else {
			assert.Equal(t, uint32(1), w.TreeUp, name)
			assert.Equal(t, uint64(10000+100*tc.ch+10*tc.rank+0), w.ToUp.Region, name)
			assert.Equal(t, uint64(20000+1000*tc.ch+100*tc.rank+0+0), w.ToUp.Step, name+": the up sender's step")
			assert.Equal(t, uint64(10000+100*tc.ch+10*tc.rank+1), w.FromUp.Region, name)
			assert.Equal(t, uint64(20000+1000*tc.ch+100*tc.rank+10+1), w.FromUp.Step, name+": the down receiver's step")
		}
		require.Equal(t, uint32(len(tc.kids)), w.NKids, name)
		for i, k := range tc.kids {
			assert.Equal(t, uint64(10000+100*tc.ch+10*k+0), w.FromKid[i].Region, name)
			assert.Equal(t, uint64(20000+1000*tc.ch+100*k+0+1), w.FromKid[i].Step, name+": the up receiver's step")
			assert.Equal(t, uint64(10000+100*tc.ch+10*k+1), w.ToKid[i].Region, name)
			assert.Equal(t, uint64(20000+1000*tc.ch+100*k+10+0), w.ToKid[i].Step, name+": the down sender's step")
		}
		assert.Equal(t, uint64(tc.ch*32), w.Lo, name)
		assert.Equal(t, uint64(min(64, tc.ch*32+32)), w.Hi, name)
		assert.Equal(t, uint64(60), w.ChunkElems, name+": 2 LL128 lines of 120 bytes of float32")
	}
}

// TestRunRefusesBadCalls: calls the communicator cannot run are errors before any driver call
// (the Comm here has no driver: reaching one would panic). PreMulSum without scalars indexed a
// nil slice before.
func TestRunRefusesBadCalls(t *testing.T) {
	c := &Comm{ctx: 1, cfg: CommConfig{Ranks: 2, Channels: 1, Buffers: testBuffers}}
	two := func(n int) [][]byte { return [][]byte{make([]byte, n), make([]byte, n)} }
	for _, tc := range []struct {
		name string
		call Call
		want string
	}{
		{"PreMulSum without scalars", Call{Algo: costmodel.Ring, Coll: costmodel.AllReduce, Proto: ProtoSimple, Dtype: kernels.Float32,
			Op: kernels.PreMulSum, Count: 4, Send: two(16), Recv: two(16)}, "0 PreMulSum scalars for op premulsum on 2 ranks"},
		{"scalars for sum", Call{Algo: costmodel.Ring, Coll: costmodel.AllReduce, Proto: ProtoSimple, Dtype: kernels.Float32,
			Op: kernels.Sum, Count: 4, Send: two(16), Recv: two(16), Scalars: two(4)}, "2 PreMulSum scalars for op sum"},
		{"Tree AllGather", Call{Algo: costmodel.Tree, Coll: costmodel.AllGather, Proto: ProtoSimple, Dtype: kernels.Float32,
			Count: 4, Send: two(16), Recv: two(32)}, "runs Ring, and Tree for AllReduce"},
		{"one rank's buffers", Call{Algo: costmodel.Ring, Coll: costmodel.AllReduce, Proto: ProtoSimple, Dtype: kernels.Float32,
			Count: 4, Send: two(16)[:1], Recv: two(16)}, "1 send and 2 recv buffers for 2 ranks"},
		{"root", Call{Algo: costmodel.Ring, Coll: costmodel.Broadcast, Proto: ProtoLL, Dtype: kernels.Int8, Count: 4, Root: 2,
			Send: two(4), Recv: two(4)}, "root 2 for 2 ranks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Run(tc.call)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
