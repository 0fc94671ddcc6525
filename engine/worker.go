package engine

import (
	"sync"

	"github.com/collplan/collplan/engine/internal/prims"
)

// A worker runs one channel's share of a call on one goroutine: NCCL's thread block. A tree
// channel of a non-root rank has two (reduce-up and broadcast-down), like runTreeSplit's two teams,
// unless its range is one FIFO step (tree.go).
// It talks to its peers through endpoints and moves data with the primitives (engine/internal/prims),
// whose state it embeds.
type worker struct {
	c  *Comm
	ch int
	prims.Prims

	job  job // what the worker runs in this call
	ring ringRun
	tree treeRun
	cn   cnChainRun
	err  error
}

// job is a worker's schedule in a call.
type job uint8

const (
	jobRingAllReduce job = iota
	jobRingAllGather
	jobRingReduceScatter
	jobRingBroadcast
	jobRingReduce
	jobTreeRoot
	jobTreeUp
	jobTreeDown
	jobTreeLeafUp
	jobTreeLeafDown
	jobTreeUpDown
	jobTreeLeafUpDown
	jobPat              // pat.go: the channel's patRun
	jobCollNetChainHead // collnet.go: a CollNetChain head's cnChainRun
)

// runJob runs the worker's job, records its error and, when wg is not nil, marks it done.
func (w *worker) runJob(wg *sync.WaitGroup) {
	switch w.job {
	case jobRingAllReduce:
		w.err = w.ring.allReduce(w)
	case jobRingAllGather:
		w.err = w.ring.allGather(w)
	case jobRingReduceScatter:
		w.err = w.ring.reduceScatter(w)
	case jobRingBroadcast:
		w.err = w.ring.broadcast(w)
	case jobRingReduce:
		w.err = w.ring.reduce(w)
	case jobTreeRoot:
		w.err = w.tree.each(w, prims.RecvReduceCopySend)
	case jobTreeUp:
		w.err = w.tree.each(w, prims.RecvReduceSend)
	case jobTreeDown:
		w.err = w.tree.each(w, prims.RecvCopySend)
	case jobTreeLeafUp:
		w.err = w.tree.each(w, prims.Send)
	case jobTreeLeafDown:
		w.err = w.tree.each(w, prims.Recv)
	case jobTreeUpDown:
		w.err = w.tree.upDown(w, prims.RecvReduceSend, prims.RecvCopySend)
	case jobTreeLeafUpDown:
		w.err = w.tree.upDown(w, prims.Send, prims.Recv)
	case jobPat:
		w.err = w.c.pats[w.ch].run(w)
	case jobCollNetChainHead:
		w.err = w.cn.run(w)
	}
	if wg != nil {
		wg.Done()
	}
}
