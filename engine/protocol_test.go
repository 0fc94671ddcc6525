package engine

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/kernels"
)

// rawRegion returns the bytes of a connection region as the transport holds them.
func rawRegion(t *testing.T, c *Comm, ch, from, to int) []byte {
	t.Helper()
	r, err := c.tr.Region(transport.ConnRegion(ch, from, to), c.layout.Size())
	require.NoError(t, err)
	return r
}

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// broadcastBytes broadcasts data (int8 elements) from rank 0 of a fresh 2-rank communicator on one
// channel with proto pinned, checks rank 1 got it, and returns the communicator.
func broadcastBytes(t *testing.T, proto costmodel.Proto, data []byte) []*Comm {
	t.Helper()
	cfg := Config{Buffers: tinyBuffers(), Override: Pin(costmodel.Ring, proto)}
	cfg.Override.Channels = 1
	comms, err := NewInProcess(2, cfg)
	require.NoError(t, err)
	out := make([]byte, len(data))
	errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
		if r == 0 {
			return c.Broadcast(bg, data, make([]byte, len(data)), len(data), kernels.Int8, 0)
		}
		return c.Broadcast(bg, nil, out, len(data), kernels.Int8, 0)
	})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Equal(t, data, out)
	return comms
}

func seqBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i + 1)
	}
	return b
}

// TestLLWireFormat reads the raw LL slots: 16-byte lines {data 4 B, flag 4 B, data 4 B, flag 4 B},
// flag = step+1, a partial last line zero padded; the tail counter is never written and the head
// counts the consumed steps.
func TestLLWireFormat(t *testing.T) {
	data := seqBytes(37) // two full slots of 16 payload bytes, then 5 bytes
	comms := broadcastBytes(t, costmodel.LL, data)
	defer closeAll(comms)
	reg := rawRegion(t, comms[0], 0, 0, 1)
	ll := reg[wire.ConnBufOffset:]
	slot := 2 * wire.LLLineBytes
	payload := append(append([]byte(nil), data...), make([]byte, 64)...) // zero padding
	for step := 0; step < 3; step++ {
		lines := 2
		if step == 2 {
			lines = 1
		}
		for l := 0; l < lines; l++ {
			line := ll[step*slot+l*wire.LLLineBytes:]
			d := payload[step*16+l*8:]
			assert.Equal(t, d[0:4], line[0:4], "step %d line %d data1", step, l)
			assert.Equal(t, uint32(step+1), le32(line[4:8]), "step %d line %d flag1", step, l)
			assert.Equal(t, d[4:8], line[8:12], "step %d line %d data2", step, l)
			assert.Equal(t, uint32(step+1), le32(line[12:16]), "step %d line %d flag2", step, l)
		}
	}
	assert.Equal(t, make([]byte, wire.LLLineBytes), ll[2*slot+wire.LLLineBytes:2*slot+2*wire.LLLineBytes], "step 2 wrote only one line")
	assert.Zero(t, le64(reg[wire.ConnTailOffset:]), "LL never writes the tail")
	assert.Equal(t, uint64(3), le64(reg[wire.ConnHeadOffset:]), "head")
}

// TestLL128WireFormat reads the raw LL128 slots: 128-byte lines of 120 payload bytes and the flag
// step+1 in the last 8 bytes; no tail.
func TestLL128WireFormat(t *testing.T) {
	data := seqBytes(250) // 120, 120, 10
	comms := broadcastBytes(t, costmodel.LL128, data)
	defer closeAll(comms)
	reg := rawRegion(t, comms[0], 0, 0, 1)
	buf := reg[wire.ConnBufOffset+comms[0].layout.LLBytes:]
	for step := 0; step < 3; step++ {
		line := buf[step*wire.LL128LineBytes : (step+1)*wire.LL128LineBytes]
		n := min(120, len(data)-step*120)
		assert.Equal(t, data[step*120:step*120+n], line[:n], "step %d payload", step)
		assert.Equal(t, make([]byte, 120-n), line[n:120], "step %d rest of the line untouched", step)
		assert.Equal(t, uint64(step+1), le64(line[120:]), "step %d flag", step)
	}
	assert.Zero(t, le64(reg[wire.ConnTailOffset:]), "LL128 never writes the tail")
	assert.Equal(t, uint64(3), le64(reg[wire.ConnHeadOffset:]), "head")
}

// TestSimpleWireFormat: Simple slots hold the payload as is, and the tail counts the published
// steps.
func TestSimpleWireFormat(t *testing.T) {
	data := seqBytes(250) // 64, 64, 64, 58
	comms := broadcastBytes(t, costmodel.Simple, data)
	defer closeAll(comms)
	reg := rawRegion(t, comms[0], 0, 0, 1)
	l := comms[0].layout
	buf := reg[wire.ConnBufOffset+l.LLBytes+l.LL128Bytes:]
	assert.Equal(t, data, buf[:len(data)])
	assert.Equal(t, uint64(4), le64(reg[wire.ConnTailOffset:]), "tail")
	assert.Equal(t, uint64(4), le64(reg[wire.ConnHeadOffset:]), "head")
}

// TestFlagProtocolsNeverWriteTail runs wrapping AllReduces on every algorithm with LL and LL128:
// every connection's tail stays 0 while its head counts every step; with Simple the tail follows
// the head.
func TestFlagProtocolsNeverWriteTail(t *testing.T) {
	for _, algo := range []costmodel.Algo{costmodel.Ring, costmodel.Tree} {
		for _, proto := range protos {
			t.Run(fmt.Sprintf("%v/%v", algo, proto), func(t *testing.T) {
				const n = 5
				cfg := Config{Buffers: tinyBuffers(), Override: Pin(algo, proto), RanksPerNode: 2}
				cfg.Override.Channels = 2
				comms, err := NewInProcess(n, cfg)
				require.NoError(t, err)
				defer closeAll(comms)
				count := 3001
				errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
					b := make([]byte, count*4)
					return c.AllReduce(bg, b, b, count, kernels.Float32, kernels.Sum)
				})
				for _, err := range errs {
					require.NoError(t, err)
				}
				conns := 0
				for _, c := range comms {
					for k, e := range c.eps {
						if k.from != c.rank || e.Step == 0 {
							continue
						}
						conns++
						reg := rawRegion(t, c, k.ch, k.from, k.to)
						head, tail := le64(reg[wire.ConnHeadOffset:]), le64(reg[wire.ConnTailOffset:])
						assert.Equal(t, e.Step, head, "%v: head", k)
						assert.Greater(t, e.Step, uint64(3*NCCLSteps), "%v wraps", k)
						if proto == costmodel.Simple {
							assert.Equal(t, e.Step, tail, "%v: Simple tail", k)
						} else {
							assert.Zero(t, tail, "%v: %v wrote the tail", k, proto)
						}
					}
				}
				assert.Positive(t, conns)
			})
		}
	}
}

// TestChannelShares checks the per-channel counters: each channel carries its contiguous share of
// the buffer (within one 16-byte alignment unit of total/channels), every collective moves the
// bytes its schedule says (ring AllReduce and tree AllReduce 2(n-1) times each channel's share over
// all ranks, AllGather and ReduceScatter n(n-1) times the per-rank share, Broadcast and Reduce
// n-1 times), what is sent is received, and the wire carries the protocol's overhead.
func TestChannelShares(t *testing.T) {
	type tc struct {
		coll costmodel.Coll
		algo costmodel.Algo
	}
	for _, c := range []tc{
		{costmodel.AllReduce, costmodel.Ring}, {costmodel.AllReduce, costmodel.Tree}, {costmodel.AllGather, costmodel.Ring},
		{costmodel.ReduceScatter, costmodel.Ring}, {costmodel.Broadcast, costmodel.Ring}, {costmodel.Reduce, costmodel.Ring},
	} {
		for _, proto := range protos {
			t.Run(fmt.Sprintf("%v/%v/%v", c.coll, c.algo, proto), func(t *testing.T) {
				const n, nc, count = 4, 3, 10007
				cfg := Config{Buffers: tinyBuffers(), Override: Pin(c.algo, proto), RanksPerNode: 2}
				cfg.Override.Channels = nc
				comms, err := NewInProcess(n, cfg)
				require.NoError(t, err)
				defer closeAll(comms)
				errs := runRanks(t, comms, 10*time.Second, func(r int, cm *Comm) error {
					switch c.coll {
					case costmodel.AllReduce:
						b := make([]byte, count*4)
						return cm.AllReduce(bg, b, b, count, kernels.Float32, kernels.Sum)
					case costmodel.AllGather:
						return cm.AllGather(bg, make([]byte, count*4), make([]byte, n*count*4), count, kernels.Float32)
					case costmodel.ReduceScatter:
						return cm.ReduceScatter(bg, make([]byte, n*count*4), make([]byte, count*4), count, kernels.Float32, kernels.Sum)
					case costmodel.Broadcast:
						b := make([]byte, count*4)
						return cm.Broadcast(bg, b, b, count, kernels.Float32, 1)
					default:
						b := make([]byte, count*4)
						return cm.Reduce(bg, b, b, count, kernels.Float32, kernels.Sum, 1)
					}
				})
				for _, err := range errs {
					require.NoError(t, err)
				}
				factor := uint64(n - 1) // Broadcast, Reduce: n-1 links each carry the share
				switch c.coll {
				case costmodel.AllReduce:
					factor = 2 * (n - 1)
				case costmodel.AllGather, costmodel.ReduceScatter:
					factor = n * (n - 1)
				}
				var total uint64
				for ch := 0; ch < nc; ch++ {
					var sent, recvd, wire uint64
					for _, cm := range comms {
						s := cm.Stats()
						require.Len(t, s, nc)
						sent += s[ch].PayloadBytes
						recvd += s[ch].RecvBytes
						wire += s[ch].WireBytes
					}
					require.Zero(t, sent%factor, "channel %d: %d bytes sent is not a multiple of %d", ch, sent, factor)
					share := sent / factor
					total += share
					assert.InDelta(t, float64(count*4)/nc, float64(share), 16, "channel %d share", ch)
					assert.Equal(t, sent, recvd, "channel %d: sent and received", ch)
					switch proto {
					case costmodel.LL:
						assert.GreaterOrEqual(t, wire, 2*sent, "channel %d: LL wire bytes", ch)
						assert.Less(t, wire, 2*sent+2*sent/4, "channel %d: LL wire bytes", ch)
					case costmodel.LL128:
						assert.GreaterOrEqual(t, wire*120, sent*128, "channel %d: LL128 wire bytes", ch)
					default:
						assert.Equal(t, sent, wire, "channel %d: Simple wire bytes", ch)
					}
				}
				assert.Equal(t, uint64(count*4), total, "the channels' shares add up to the buffer")
			})
		}
	}
}

// TestNoAllocationPerStep: a call allocates the same whatever the number of FIFO steps it takes
// (per call: the channel goroutines and their bookkeeping; per step and per message: nothing).
func TestNoAllocationPerStep(t *testing.T) {
	for _, algo := range []costmodel.Algo{costmodel.Ring, costmodel.Tree} {
		for _, proto := range protos {
			t.Run(fmt.Sprintf("%v/%v", algo, proto), func(t *testing.T) {
				const n = 3
				cfg := Config{Buffers: tinyBuffers(), Override: Pin(algo, proto)}
				comms, err := NewInProcess(n, cfg)
				require.NoError(t, err)
				defer closeAll(comms)
				bufs := make([][]byte, n)
				for r := range bufs {
					bufs[r] = make([]byte, 40000*4)
				}
				runs, large := 20, 40000
				if testing.Short() {
					runs, large = 5, 10000
				}
				// Tens of steps against thousands. Both calls take more than one FIFO step per
				// channel, so both run the same goroutines (a one-step tree channel runs on one).
				assertNoAllocationPerStep(t, comms, rankSteps, runs, 500, large, func(count int) {
					errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
						return c.AllReduce(bg, bufs[r], bufs[r], count, kernels.Float32, kernels.Sum)
					})
					for _, err := range errs {
						require.NoError(t, err)
					}
				})
			})
		}
	}
}
