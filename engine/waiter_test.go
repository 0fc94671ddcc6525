package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/engine/transport"
)

// parkTransport is processTransport with a bell for waits (wire.Parker), as the network
// transport's ranks have: the engine counts the transport's own polling goroutines.
type parkTransport struct{ processTransport }

func (parkTransport) Poke()                    {}
func (parkTransport) Bell() <-chan struct{}    { return nil }
func (parkTransport) ParkAfter() time.Duration { return 0 }

// TestSpinFitsCountsTheTransport: a rank whose transport stores from goroutines of its own (a
// Parker) spins only where those goroutines have Ps of their own beside its workers; with one P
// per process (collbench --hosts 2 -np 2 on 2 cores) its spin held the P its data had to come
// through. Without a Parker the rule is as before.
func TestSpinFitsCountsTheTransport(t *testing.T) {
	for _, tc := range []struct {
		name         string
		park         bool
		procs, cores int
		k            int
		want         bool
	}{
		{"no bell, one P", false, 1, 2, 1, true},
		{"bell, one P", true, 1, 2, 1, false},
		{"bell, two Ps", true, 2, 2, 1, false},
		{"bell, three Ps", true, 3, 4, 1, true},
		{"bell, two workers, three Ps", true, 3, 4, 2, false},
		{"bell, two workers, four Ps", true, 4, 4, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr transport.Transport = processTransport{transport.NewInProcess().Rank()}
			if tc.park {
				tr = parkTransport{processTransport{transport.NewInProcess().Rank()}}
			}
			c, err := New(0, 2, tr, Config{})
			require.NoError(t, err)
			defer c.Close()
			require.Equal(t, tc.park, c.park != nil)
			require.Equal(t, 1, c.procRanks, "a rank per process")
			c.procs, c.cores = tc.procs, tc.cores
			assert.Equal(t, tc.want, c.spinFits(tc.k))
		})
	}
}
