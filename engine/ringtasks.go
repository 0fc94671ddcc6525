package engine

import (
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/algorithm"
	"github.com/collplan/collplan/engine/internal/wire"
)

// ringTasks sets up channel ch's ring connections for cl and appends its worker, which runs the
// channel's element range [lo, hi).
func (c *Comm) ringTasks(w *wire.Waiter, cl *call, ch, lo, hi int, tasks []*worker) ([]*worker, error) {
	ring, ix := c.ring(ch)
	for len(c.ringEps) <= ch {
		c.ringEps = append(c.ringEps, [2]*wire.Endpoint{})
	}
	eps := &c.ringEps[ch]
	if eps[0] == nil {
		n := len(ring)
		prev, next := ring[algorithm.Mod(ix-1, n)], ring[algorithm.Mod(ix+1, n)]
		rx, err := c.endpoint(ch, prev, c.rank)
		if err != nil {
			return tasks, err
		}
		tx, err := c.endpoint(ch, c.rank, next)
		if err != nil {
			return tasks, err
		}
		eps[0], eps[1] = rx, tx
	}
	wk := c.worker(w, cl, ch, 0)
	wk.SetPeers(eps[:1], eps[1:])
	wk.EnsureScratch(wk.PieceBytes, 1)
	wk.ring = algorithm.Ring{Cl: &cl.kc, Ring: ring, Ix: ix, Lo: lo, Hi: hi}
	switch cl.coll {
	case costmodel.AllReduce:
		wk.job = jobRingAllReduce
	case costmodel.AllGather:
		wk.job = jobRingAllGather
	case costmodel.ReduceScatter:
		wk.job = jobRingReduceScatter
	case costmodel.Broadcast:
		wk.job = jobRingBroadcast
	default:
		wk.job = jobRingReduce
	}
	return append(tasks, wk), nil
}
