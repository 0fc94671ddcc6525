package plugin

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestTailKeepsLastBytes checks the ring against the obvious oracle: the last max bytes of
// everything written, for writes of every size around the capacity.
func TestTailKeepsLastBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, max := range []int{1, 7, 64, 1000} {
		tl := newTail(max)
		var all []byte
		for i := range 300 {
			p := make([]byte, rng.IntN(3*max+2))
			for j := range p {
				p[j] = byte(rng.IntN(256))
			}
			n, err := tl.Write(p)
			assert.NoError(t, err)
			assert.Equal(t, len(p), n)
			all = append(all, p...)
			want := all[len(all)-min(len(all), max):]
			if !assert.True(t, bytes.Equal(want, tl.bytes()), "max %d after write %d", max, i) {
				return
			}
		}
	}
}

// TestTailWriteCost: once full, a write copies only its own bytes and allocates nothing (the old
// tail cloned its whole buffer on every write: 100 MB of 1 KiB lines cost the host seconds).
func TestTailWriteCost(t *testing.T) {
	tl := newTail(32 << 10)
	line := bytes.Repeat([]byte("x"), 1023)
	for range 64 {
		_, _ = tl.Write(line)
	}
	allocs := testing.AllocsPerRun(1000, func() { _, _ = tl.Write(line) })
	assert.Zero(t, allocs, "allocations per write of a full tail")
}

func BenchmarkTailWrite(b *testing.B) {
	tl := newTail(32 << 10)
	line := bytes.Repeat([]byte("x"), 1023)
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		_, _ = tl.Write(line)
	}
}
