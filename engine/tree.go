package engine

import (
	"unsafe"

	"github.com/collplan/collplan/engine/internal/algorithm"
	"github.com/collplan/collplan/engine/internal/prims"
	"github.com/collplan/collplan/engine/internal/wire"
)

// treeTasks sets up channel ch's tree connections for a Tree AllReduce and appends its workers.
// Even channels run on tree 0, odd channels on tree 1, so half the channels climb each tree of the
// double binary tree. The root reduces and turns the sums around in one primitive; every other rank
// runs reduce-up and broadcast-down concurrently on two goroutines, chunk by chunk (NCCL's
// runTreeSplit, src/device/all_reduce.h). A channel whose range is one FIFO step has nothing to
// overlap (its one piece goes down only after it has come up), so there a single goroutine runs up
// and then down, as NCCL's runTreeUpDown does: a second goroutine would only add a wake-up and,
// with more ranks than cores, a context switch to the critical path.
func (c *Comm) treeTasks(w *wire.Waiter, cl *call, ch, lo, hi int, tasks []*worker) ([]*worker, error) {
	links := c.tree[ch%2][c.rank]
	var fromBuf, toBuf [prims.MaxPeers]*wire.Endpoint
	fromKids, toKids := fromBuf[:0], toBuf[:0]
	for _, k := range links.Down {
		if k < 0 {
			continue
		}
		rx, err := c.endpoint(ch, k, c.rank)
		if err != nil {
			return tasks, err
		}
		tx, err := c.endpoint(ch, c.rank, k)
		if err != nil {
			return tasks, err
		}
		fromKids, toKids = append(fromKids, rx), append(toKids, tx)
	}
	t := algorithm.Tree{Cl: &cl.kc, Lo: lo, Hi: hi}
	if links.Up < 0 {
		wk := c.worker(w, cl, ch, 0)
		wk.SetPeers(fromKids, toKids)
		wk.EnsureScratch(wk.PieceBytes, len(fromKids))
		wk.tree, wk.job = t, jobTreeRoot
		return append(tasks, wk), nil
	}
	return c.treeBranchTasks(w, cl, ch, lo, hi, links.Up, fromKids, toKids, tasks)
}

// treeBranchTasks appends the workers of a non-root rank whose parent is rank up: reduce-up and
// broadcast-down on two goroutines, or one when the range is one FIFO step (Tree, and the
// non-head ranks of a CollNetChain, collnet.go).
func (c *Comm) treeBranchTasks(w *wire.Waiter, cl *call, ch, lo, hi, up int, fromKids, toKids []*wire.Endpoint, tasks []*worker) ([]*worker, error) {
	t := algorithm.Tree{Cl: &cl.kc, Lo: lo, Hi: hi}
	fromUp, err := c.endpoint(ch, up, c.rank)
	if err != nil {
		return tasks, err
	}
	toUp, err := c.endpoint(ch, c.rank, up)
	if err != nil {
		return tasks, err
	}
	if hi-lo <= cl.plan.pieceElems {
		wk := c.worker(w, cl, ch, 0)
		wk.SetPeers(fromKids, []*wire.Endpoint{toUp})
		wk.EnsureScratch(wk.PieceBytes, max(len(fromKids), 1))
		t.FromUp = fromUp
		t.NKids = copy(t.ToKids[:], toKids)
		wk.tree, wk.job = t, jobTreeUpDown
		if len(fromKids) == 0 {
			wk.job = jobTreeLeafUpDown
		}
		return append(tasks, wk), nil
	}
	upw := c.worker(w, cl, ch, 0)
	upw.SetPeers(fromKids, []*wire.Endpoint{toUp})
	upw.EnsureScratch(upw.PieceBytes, len(fromKids))
	down := c.worker(w, cl, ch, 1)
	down.SetPeers([]*wire.Endpoint{fromUp}, toKids)
	down.EnsureScratch(down.PieceBytes, 1)
	upw.tree, down.tree = t, t
	upw.job, down.job = jobTreeUp, jobTreeDown
	if c.raceHidden {
		// In place, down writes chunk k where up read it; the order runs through the root and
		// the transport's atomics, which the race detector cannot see here (wire's race.go).
		upw.RaceRel = unsafe.Pointer(&upw.RaceTok)
		down.RaceAcq = upw.RaceRel
	}
	if len(fromKids) == 0 {
		upw.job, down.job = jobTreeLeafUp, jobTreeLeafDown
	}
	return append(tasks, upw, down), nil
}
