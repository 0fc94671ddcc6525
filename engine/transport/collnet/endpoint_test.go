package collnet

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/kernels"
)

// rawContributor is a hand-written client of the endpoint's protocol (endpoint.go).
type rawContributor struct {
	t    *testing.T
	conn net.Conn
}

func dialRaw(t *testing.T, addr string, h cnHello) *rawContributor {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	var b [cnHelloBytes]byte
	h.put(b[:])
	_, err = conn.Write(b[:])
	require.NoError(t, err)
	return &rawContributor{t: t, conn: conn}
}

// data sends a data frame of step with nb bytes of payload (payload may be shorter than nb:
// the frame is then cut short).
func (c *rawContributor) data(dt kernels.Dtype, op kernels.Op, step uint64, nb int, payload []byte) {
	c.dataColl(AllReduce, dt, op, step, nb, payload)
}

// dataColl is data for collective k.
func (c *rawContributor) dataColl(k Coll, dt kernels.Dtype, op kernels.Op, step uint64, nb int, payload []byte) {
	var h [cnHdrBytes]byte
	putHdrColl(h[:], cnKindData, k, dt, op, step, nb)
	c.conn.Write(append(h[:], payload...))
}

// next reads the next frame: its kind, step and payload (the message of an error frame).
func (c *rawContributor) next() (uint32, uint64, []byte, error) {
	c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var h [cnHdrBytes]byte
	if _, err := io.ReadFull(c.conn, h[:]); err != nil {
		return 0, 0, nil, err
	}
	le := binary.LittleEndian
	nb := int(le.Uint32(h[16:]))
	require.LessOrEqual(c.t, nb, 1<<20)
	p := make([]byte, nb)
	_, err := io.ReadFull(c.conn, p)
	return le.Uint32(h[0:]), le.Uint64(h[8:]), p, err
}

// TestCollNetEndpointProtocol: the endpoint reduces two contributors' steps (int32 sum, worked by
// hand: 1+2 = 3 in every element), and a bad hello or frame fails the job with an error frame to
// every contributor saying why, never a panic or an allocation of the claimed size; the endpoint
// keeps serving other jobs.
func TestCollNetEndpointProtocol(t *testing.T) {
	ep, err := ListenCollNet("127.0.0.1:0")
	require.NoError(t, err)
	defer ep.Close()
	addr := ep.Addr()
	i32 := func(v int32, n int) []byte {
		b := make([]byte, 4*n)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
		}
		return b
	}
	hello := func(job uint64, node uint32) cnHello {
		return cnHello{job: job, ch: 1, share: 0, node: node, nNodes: 2, maxStep: 64}
	}

	t.Run("reduces", func(t *testing.T) {
		a, b := dialRaw(t, addr, hello(1, 0)), dialRaw(t, addr, hello(1, 1))
		defer a.conn.Close()
		defer b.conn.Close()
		for step := uint64(0); step < 3*NCCLSteps; step++ {
			a.data(kernels.Int32, kernels.Sum, step, 16, i32(1, 4))
			b.data(kernels.Int32, kernels.Sum, step, 16, i32(2, 4))
			for _, c := range []*rawContributor{a, b} {
				kind, s, p, err := c.next()
				require.NoError(t, err)
				require.Equal(t, uint32(cnKindData), kind, "%s", p)
				assert.Equal(t, step, s)
				assert.Equal(t, i32(3, 4), p)
			}
		}
	})

	// AllGather: node k's part at k*B of every node's result; ReduceScatter: the sum of slice k
	// to node k (values by hand).
	ints := func(vs ...int32) []byte {
		b := make([]byte, 0, 4*len(vs))
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint32(b, uint32(v))
		}
		return b
	}
	t.Run("gathers", func(t *testing.T) {
		a, b := dialRaw(t, addr, hello(2, 0)), dialRaw(t, addr, hello(2, 1))
		defer a.conn.Close()
		defer b.conn.Close()
		for step := uint64(0); step < 3*NCCLSteps; step++ {
			b.dataColl(AllGather, kernels.Int32, kernels.Sum, step, 8, ints(2, 3))
			a.dataColl(AllGather, kernels.Int32, kernels.Sum, step, 8, ints(1, int32(step)))
			for _, c := range []*rawContributor{a, b} {
				kind, s, p, err := c.next()
				require.NoError(t, err)
				require.Equal(t, uint32(cnKindData), kind, "%s", p)
				assert.Equal(t, step, s)
				assert.Equal(t, ints(1, int32(step), 2, 3), p)
			}
		}
	})
	t.Run("scatters", func(t *testing.T) {
		a, b := dialRaw(t, addr, hello(3, 0)), dialRaw(t, addr, hello(3, 1))
		defer a.conn.Close()
		defer b.conn.Close()
		for step := uint64(0); step < 3*NCCLSteps; step++ {
			a.dataColl(ReduceScatter, kernels.Int32, kernels.Max, step, 16, ints(1, 20, 3, 40))
			b.dataColl(ReduceScatter, kernels.Int32, kernels.Max, step, 16, ints(10, 2, 30, 4))
			for node, c := range []*rawContributor{a, b} {
				kind, s, p, err := c.next()
				require.NoError(t, err)
				require.Equal(t, uint32(cnKindData), kind, "%s", p)
				assert.Equal(t, step, s)
				assert.Equal(t, [][]byte{ints(10, 20), ints(30, 40)}[node], p, "node %d", node)
			}
		}
	})

	for _, tc := range []struct {
		name string
		send func(a, b *rawContributor)
		want string
	}{
		{"size above the step", func(a, b *rawContributor) { a.data(kernels.Int32, kernels.Sum, 0, 1<<30, nil) }, "1073741824 bytes (want 1..64"},
		{"empty", func(a, b *rawContributor) { a.data(kernels.Int32, kernels.Sum, 0, 0, nil) }, "0 bytes"},
		{"partial element", func(a, b *rawContributor) { a.data(kernels.Int32, kernels.Sum, 0, 6, make([]byte, 6)) }, "6 bytes (want 1..64 per node, whole int32 elements)"},
		{"step out of order", func(a, b *rawContributor) { a.data(kernels.Int32, kernels.Sum, 5, 4, i32(1, 1)) }, "step 5, want 0"},
		{"bad dtype", func(a, b *rawContributor) { a.data(kernels.Dtype(99), kernels.Sum, 0, 4, i32(1, 1)) }, "dtype 99 op 0, which the endpoint does not reduce"},
		{"prod", func(a, b *rawContributor) { a.data(kernels.Int32, kernels.Prod, 0, 4, i32(1, 1)) }, "which the endpoint does not reduce"},
		{"disagreeing nodes", func(a, b *rawContributor) {
			a.data(kernels.Int32, kernels.Sum, 0, 4, i32(1, 1))
			time.Sleep(20 * time.Millisecond) // node 0's arrives first
			b.data(kernels.Int32, kernels.Max, 0, 4, i32(1, 1))
		}, "step 0: node 1 sent AllReduce of 4 bytes of int32 max, another node AllReduce of 4 bytes of int32 sum"},
		{"disagreeing collectives", func(a, b *rawContributor) {
			a.dataColl(AllGather, kernels.Int32, kernels.Sum, 0, 4, i32(1, 1))
			time.Sleep(20 * time.Millisecond) // node 0's arrives first
			b.data(kernels.Int32, kernels.Sum, 0, 4, i32(1, 1))
		}, "step 0: node 1 sent AllReduce of 4 bytes of int32 sum, another node AllGather of 4 bytes of int32 sum"},
		{"unknown collective", func(a, b *rawContributor) { a.dataColl(Coll(9), kernels.Int32, kernels.Sum, 0, 4, i32(1, 1)) }, "collective 9, which the endpoint does not run"},
		{"ReduceScatter part above the step", func(a, b *rawContributor) {
			a.dataColl(ReduceScatter, kernels.Int32, kernels.Sum, 0, 256, nil)
		}, "ReduceScatter of 256 bytes (want 1..64 per node"},
		{"ReduceScatter not in slices", func(a, b *rawContributor) {
			a.dataColl(ReduceScatter, kernels.Int32, kernels.Sum, 0, 12, make([]byte, 12))
		}, "ReduceScatter of 12 bytes (want 2 slices of whole int32 elements)"},
		{"AllGather of no dtype", func(a, b *rawContributor) {
			a.dataColl(AllGather, kernels.Dtype(99), kernels.Sum, 0, 4, i32(1, 1))
		}, "AllGather with dtype 99 op 0"},
		{"more than NCCL_STEPS outstanding", func(a, b *rawContributor) {
			for s := uint64(0); s <= NCCLSteps; s++ {
				a.data(kernels.Int32, kernels.Sum, s, 4, i32(1, 1))
			}
		}, "node 0 sent step 8 while step 0 still holds its slot"},
		{"frame kind", func(a, b *rawContributor) {
			var h [cnHdrBytes]byte
			putHdr(h[:], 77, 0, 0, 0, 0)
			a.conn.Write(h[:])
		}, "frame kind 77"},
		{"lost without goodbye", func(a, b *rawContributor) { a.conn.Close() }, "node 0's connection ended without a goodbye"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := JobID(tc.name)
			a, b := dialRaw(t, addr, hello(job, 0)), dialRaw(t, addr, hello(job, 1))
			defer a.conn.Close()
			defer b.conn.Close()
			time.Sleep(20 * time.Millisecond) // both joined
			tc.send(a, b)
			kind, _, msg, err := b.next()
			require.NoError(t, err)
			assert.Equal(t, uint32(cnKindError), kind)
			assert.Contains(t, string(msg), tc.want)
			_, _, _, err = b.next()
			assert.Error(t, err, "the job's connections are closed")
		})
	}

	for _, tc := range []struct {
		name  string
		hello cnHello
		want  string
	}{
		{"one node", cnHello{job: 9, nNodes: 1, maxStep: 64}, "1 nodes (want 2.."},
		{"node out of range", cnHello{job: 9, node: 3, nNodes: 2, maxStep: 64}, "node 3 of 2"},
		{"step too large", cnHello{job: 9, nNodes: 2, maxStep: 1 << 30}, "step of 1073741824 bytes"},
		{"channel", cnHello{job: 9, ch: 1000, nNodes: 2, maxStep: 64}, "channel 1000"},
		{"version", cnHello{job: 9, nNodes: 2, maxStep: 64}, "protocol version 1, this endpoint speaks 2"},
	} {
		t.Run("hello/"+tc.name, func(t *testing.T) {
			c := dialRaw(t, addr, tc.hello)
			if tc.name == "version" { // a contributor of protocol 1 (before collectives were named)
				c.conn.Close()
				conn, err := net.Dial("tcp", addr)
				require.NoError(t, err)
				var b [cnHelloBytes]byte
				tc.hello.put(b[:])
				binary.LittleEndian.PutUint32(b[4:], 1)
				_, err = conn.Write(b[:])
				require.NoError(t, err)
				c = &rawContributor{t: t, conn: conn}
			}
			defer c.conn.Close()
			kind, _, msg, err := c.next()
			require.NoError(t, err)
			assert.Equal(t, uint32(cnKindError), kind)
			assert.Contains(t, string(msg), tc.want)
		})
	}
	t.Run("hello/disagreeing group", func(t *testing.T) {
		a := dialRaw(t, addr, cnHello{job: 10, nNodes: 2, maxStep: 64})
		defer a.conn.Close()
		time.Sleep(20 * time.Millisecond)
		b := dialRaw(t, addr, cnHello{job: 10, node: 1, nNodes: 3, maxStep: 64})
		defer b.conn.Close()
		kind, _, msg, err := b.next()
		require.NoError(t, err)
		assert.Equal(t, uint32(cnKindError), kind)
		assert.Contains(t, string(msg), "node 1 says 3 nodes, the group has 2")
	})
	t.Run("not a client", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		conn.Write(make([]byte, cnHelloBytes))
		c := &rawContributor{t: t, conn: conn}
		kind, _, msg, err := c.next()
		require.NoError(t, err)
		assert.Equal(t, uint32(cnKindError), kind)
		assert.Contains(t, string(msg), "not a collplan CollNet client")
	})
}
