package engine

import (
	"fmt"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/algorithm"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/kernels"
)

// PAT's legality, chunk and channel set-up; its kernel and schedule are engine/internal/algorithm's
// pat.go, which says what NCCL does and what the engine runs.

// patLegal returns the ErrInvalid error for a PAT plan NCCL would not run, nil when it runs.
func patLegal(rpn int, coll costmodel.Coll, op kernels.Op, proto costmodel.Proto) error {
	switch {
	case coll != costmodel.AllGather && coll != costmodel.ReduceScatter:
		return fmt.Errorf("%w: PAT for %v (NCCL runs PAT for AllGather and ReduceScatter only)", ErrInvalid, coll)
	case rpn != 1:
		return fmt.Errorf("%w: PAT with %d ranks per node (NCCL runs PAT at one rank per node)", ErrInvalid, rpn)
	case proto != costmodel.Simple:
		return fmt.Errorf("%w: PAT with %v (NCCL runs PAT with Simple only)", ErrInvalid, proto)
	case coll == costmodel.ReduceScatter && (op == kernels.Avg || op == kernels.PreMulSum):
		return fmt.Errorf("%w: PAT ReduceScatter with %v (NCCL's PAT does not run PreMulSum or SumPostDiv)", ErrInvalid, op)
	}
	return nil
}

// patChunk is NCCL's PAT chunk for a call of nBytes (model bytes) on nCh channels: the Simple
// slot's payload, halved while chunk*nCh*k > nBytes (k = 32 for AllGather, 16 for ReduceScatter)
// and the chunk is above 64 KiB (calcCollChunking). planned, when positive, is the planner's
// chunk, used instead, capped at the slot. The result is a whole number of elements.
func patChunk(coll costmodel.Coll, nBytes, payload, planned int64, nCh, es int) int64 {
	chunk := payload
	if planned > 0 {
		chunk = min(planned, payload)
	} else {
		k := int64(32)
		if coll == costmodel.ReduceScatter {
			k = 16
		}
		for chunk*int64(nCh)*k > nBytes && chunk > 64<<10 {
			chunk /= 2
		}
	}
	return max(int64(es), chunk/int64(es)*int64(es))
}

// patTasks sets up channel ch's PAT connections for cl (made on first use, only the ones the
// schedule uses) and appends its worker.
func (c *Comm) patTasks(w *wire.Waiter, cl *call, ch, lo, hi int, tasks []*worker) ([]*worker, error) {
	for len(c.pats) <= ch {
		c.pats = append(c.pats, &algorithm.PAT{})
	}
	p := c.pats[ch]
	nd := algorithm.PATDims(c.n)
	p.Sends, p.Recvs = p.Sends[:0], p.Recvs[:0]
	for d := 0; d < nd; d++ {
		to, from := algorithm.PATPeers(cl.coll, c.rank, c.n, d)
		tx, err := c.endpoint(ch, c.rank, to)
		if err != nil {
			return tasks, err
		}
		rx, err := c.endpoint(ch, from, c.rank)
		if err != nil {
			return tasks, err
		}
		p.Sends, p.Recvs = append(p.Sends, tx), append(p.Recvs, rx)
	}
	p.Cl, p.Lo, p.Hi = &cl.kc, lo, hi
	k := 0
	if cl.coll == costmodel.ReduceScatter {
		k = 1
	}
	if p.Sched[k] == nil {
		p.Sched[k] = algorithm.PATSchedule(cl.coll, c.n)
	}
	p.Ops = p.Sched[k]
	wk := c.worker(w, cl, ch, 0)
	wk.EnsureScratch(wk.PieceBytes, 1)
	if cl.coll == costmodel.ReduceScatter {
		for len(p.Acc) <= nd {
			p.Acc = append(p.Acc, nil)
		}
		for i := range p.Acc {
			if len(p.Acc[i]) < wk.PieceBytes {
				p.Acc[i] = make([]byte, wk.PieceBytes)
			}
		}
	}
	wk.job = jobPat
	return append(tasks, wk), nil
}
