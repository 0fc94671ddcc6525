package planner

import (
	"fmt"

	"github.com/collplan/collplan/costmodel"
)

// NCCLSteps is NCCL_STEPS, the slots of a connection FIFO.
const NCCLSteps = 8

// Buffers are the per-connection buffer sizes of each protocol (reference §10). The engine scales
// them; zero fields take NCCL's defaults.
type Buffers struct {
	Simple int64 // NCCL_BUFFSIZE, 4 MiB
	LL     int64 // NCCL_LL_BUFFSIZE, 8 lines x 512 threads x 8 steps x 16 B = 524288
	LL128  int64 // NCCL_LL128_BUFFSIZE, 120 x 640 x 8 x 8 B = 4915200
	// NVLSChunk is NCCL_NVLS_CHUNKSIZE, 128 KiB.
	NVLSChunk int64
}

// DefaultBuffers returns NCCL's defaults (reference §10).
func DefaultBuffers() Buffers {
	return Buffers{Simple: 4 << 20, LL: 8 * 512 * NCCLSteps * 16, LL128: 120 * 640 * NCCLSteps * 8, NVLSChunk: 128 << 10}
}

// WithDefaults returns b with each zero field set to NCCL's default.
func (b Buffers) WithDefaults() Buffers {
	d := DefaultBuffers()
	if b.Simple == 0 {
		b.Simple = d.Simple
	}
	if b.LL == 0 {
		b.LL = d.LL
	}
	if b.LL128 == 0 {
		b.LL128 = d.LL128
	}
	if b.NVLSChunk == 0 {
		b.NVLSChunk = d.NVLSChunk
	}
	return b
}

func (b Buffers) validate() error {
	for _, f := range []struct {
		name string
		v    int64
		min  int64
	}{{"simple buffer", b.Simple, NCCLSteps * grain(costmodel.Simple)},
		{"LL buffer", b.LL, NCCLSteps * grain(costmodel.LL) * 2},
		{"LL128 buffer", b.LL128, NCCLSteps * 2048},
		{"NVLS chunk", b.NVLSChunk, 512}} {
		if f.v < f.min {
			return fmt.Errorf("%s %d bytes is below the minimum %d", f.name, f.v, f.min)
		}
	}
	return nil
}

// grain is the chunk alignment of a protocol: LL 16 B, LL128 1920 B (32x8/16x15x8 lines), Simple 512 B.
func grain(p costmodel.Proto) int64 {
	switch p {
	case costmodel.LL:
		return 16
	case costmodel.LL128:
		return 1920
	}
	return 512
}

// size is NCCL's channel and thread sizing (reference §8) followed by the chunk computation (§10),
// then the tuner's channel and chunk overrides.
func (pl *Planner) size(cls Class, a costmodel.Algo, p costmodel.Proto, n int64, edits []Edit) Decision {
	t := &pl.topo
	nc := int64(t.CommNChannels)
	nt := int64(pl.table.MaxThreads[a][p])
	th := int64(pl.table.ThreadThresholds[a][p])
	switch a {
	case costmodel.CollNetDirect:
		nHeads := int64(max(1, t.CollNetDirectNHeads))
		ncSwitch, flag := int64(16), true
		for ncSwitch >= 1 && flag {
			for {
				flag = n < nc*nt*nHeads*th
				if !flag || nc <= ncSwitch {
					break
				}
				if nc == ncSwitch+ncSwitch/2 {
					th /= 2
				}
				nc--
			}
			ncSwitch /= 2
		}
	case costmodel.NVLS, costmodel.NVLSTree:
		nc = int64(t.NVLSChannels)
		if a == costmodel.NVLS && t.NNodes > 1 {
			nc = min(nc, int64(t.CommNChannels))
		}
	default:
		for n < nc*nt*th && nc >= 2 {
			nc--
		}
	}
	if a != costmodel.NVLS && a != costmodel.NVLSTree && a != costmodel.CollNetDirect {
		for n < nc*nt*th && nt%128 == 0 {
			nt /= 2
		}
	}
	if p == costmodel.Simple {
		switch a {
		case costmodel.Ring:
			nt += 32
		case costmodel.Tree:
			nt += 128
		}
	}
	if nt < 96 {
		nt = 96
	}
	if a == costmodel.Tree || a == costmodel.PAT {
		nt = 640
	}
	d := Decision{Algo: a, Proto: p, Channels: int(nc), Threads: int(nt)}
	var chunkOverride int64
	for _, e := range edits {
		switch e.Kind {
		case Channels:
			if e.Value > 0 {
				d.Channels = int(e.Value)
			}
		case Chunk:
			if e.Value > 0 {
				chunkOverride = int64(e.Value)
			}
		}
	}
	d.ChunkBytes, d.SliceBytes = pl.chunk(cls, a, p, n, chunkOverride)
	return d
}

// chunk is NCCL's calcCollChunking (reference §10) for one work piece (one channel per part):
// chunk and slice bytes. override, when > 0, is a tuner's chunk (v6 getChunkSize), clamped to the
// protocol's ceiling and rounded down to the grain.
func (pl *Planner) chunk(cls Class, a costmodel.Algo, p costmodel.Proto, n int64, override int64) (int64, int64) {
	t := &pl.topo
	b := pl.buffers
	c := cls.Coll
	chunkSteps, sliceSteps := int64(1), int64(1)
	if a == costmodel.Ring && p == costmodel.Simple && (c == costmodel.AllReduce || c == costmodel.AllGather || c == costmodel.ReduceScatter) {
		chunkSteps, sliceSteps = 4, 2
	}
	var stepSize int64
	switch p {
	case costmodel.LL:
		stepSize = b.LL / NCCLSteps
	case costmodel.LL128:
		stepSize = b.LL128 / NCCLSteps
	default:
		stepSize = b.Simple / NCCLSteps
	}
	chunk := stepSize * chunkSteps
	switch p {
	case costmodel.LL:
		chunk /= 2
	case costmodel.LL128:
		chunk = chunk / 16 * 15
	}
	ceiling := chunk
	const nCh = 1
	ppnInt := int64(t.NRanks / t.NNodes)
	depth := max(1, ppnInt)
	halve := func(cond func() bool, floor int64) {
		for cond() && chunk > floor {
			chunk /= 2
		}
	}
	switch {
	case a == costmodel.CollNetDirect:
		heads := int64(max(1, t.CollNetDirectNHeads))
		halve(func() bool { return n/(nCh*heads*chunk) < depth*64 }, 128<<10)
		halve(func() bool { return n/(nCh*heads*chunk) < depth*8 }, 64<<10)
		halve(func() bool { return n/(nCh*heads*chunk) < depth*8 }, 32<<10)
	case a == costmodel.CollNetChain:
		chunk = min(256<<10, b.Simple/NCCLSteps*chunkSteps)
		halve(func() bool { return n/(nCh*chunk) < depth*64 }, 128<<10)
		halve(func() bool { return n/(nCh*chunk) < depth*8 }, 64<<10)
		halve(func() bool { return n/(nCh*chunk) < depth }, 32<<10)
	case a == costmodel.NVLS:
		if (c == costmodel.AllGather || c == costmodel.ReduceScatter) && cls.RegBuff {
			chunk = b.Simple / NCCLSteps
			break
		}
		maxChunk := b.NVLSChunk
		if t.NNodes > 1 && pl.table.BW[costmodel.AllReduce][costmodel.NVLS][costmodel.Simple] < 150 {
			maxChunk = min(maxChunk, 32<<10)
		}
		chunk = min(chunk, maxChunk)
		ops := nCh * int64(max(1, t.LocalRanks))
		for _, s := range []struct{ mult, to int64 }{{64, 64 << 10}, {8, 32 << 10}, {2, 16 << 10}} {
			if chunk > s.to && n < s.mult*ops*chunk {
				chunk = s.to
			}
		}
	case a == costmodel.NVLSTree:
		treeMax := chunk
		if t.NNodes >= 4 {
			treeMax = 64 << 10
		}
		chunk = min(b.NVLSChunk, treeMax)
		ops := nCh * int64(max(1, t.LocalRanks))
		for _, s := range []struct{ mult, to int64 }{{32, 256 << 10}, {16, 128 << 10}, {4, 64 << 10}, {1, 32 << 10}} {
			if chunk > s.to && n < s.mult*ops*chunk {
				chunk = s.to
			}
		}
	case a == costmodel.Tree && p == costmodel.LL128:
		ppn := float64(t.NRanks) / float64(t.NNodes)
		s := 1 + float64(costmodel.Log2i(int64(t.NNodes))) + 0.1*ppn
		halve(func() bool { return float64(n/(nCh*chunk)) < s*64/ppn }, 128<<10)
		halve(func() bool { return float64(n/(nCh*chunk)) < s*16/ppn }, 32<<10)
	case a == costmodel.PAT:
		k := int64(32)
		if c == costmodel.ReduceScatter {
			k = 16
		}
		halve(func() bool { return chunk*nCh*k > n }, 64<<10)
	}
	if override > 0 {
		chunk = min(override, ceiling)
	}
	g := grain(p)
	chunk = max(g, chunk/g*g)
	return chunk, chunk / chunkSteps * sliceSteps
}
