package engine

import (
	"sync"

	"github.com/collplan/collplan/engine/internal/algorithm"
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
	ring algorithm.Ring
	tree algorithm.Tree
	cn   algorithm.CollNetChain
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
	jobPat              // pattasks.go: the channel's algorithm.PAT
	jobCollNetChainHead // collnet.go: a CollNetChain head's algorithm.CollNetChain
)

// runJob runs the worker's job, records its error and, when wg is not nil, marks it done.
func (w *worker) runJob(wg *sync.WaitGroup) {
	switch w.job {
	case jobRingAllReduce:
		w.err = w.ring.AllReduce(&w.Prims)
	case jobRingAllGather:
		w.err = w.ring.AllGather(&w.Prims)
	case jobRingReduceScatter:
		w.err = w.ring.ReduceScatter(&w.Prims)
	case jobRingBroadcast:
		w.err = w.ring.Broadcast(&w.Prims)
	case jobRingReduce:
		w.err = w.ring.Reduce(&w.Prims)
	case jobTreeRoot:
		w.err = w.tree.Each(&w.Prims, prims.RecvReduceCopySend)
	case jobTreeUp:
		w.err = w.tree.Each(&w.Prims, prims.RecvReduceSend)
	case jobTreeDown:
		w.err = w.tree.Each(&w.Prims, prims.RecvCopySend)
	case jobTreeLeafUp:
		w.err = w.tree.Each(&w.Prims, prims.Send)
	case jobTreeLeafDown:
		w.err = w.tree.Each(&w.Prims, prims.Recv)
	case jobTreeUpDown:
		w.err = w.tree.UpDown(&w.Prims, prims.RecvReduceSend, prims.RecvCopySend)
	case jobTreeLeafUpDown:
		w.err = w.tree.UpDown(&w.Prims, prims.Send, prims.Recv)
	case jobPat:
		w.err = w.c.pats[w.ch].Run(&w.Prims)
	case jobCollNetChainHead:
		w.err = w.cn.Run(&w.Prims)
	}
	if wg != nil {
		wg.Done()
	}
}
