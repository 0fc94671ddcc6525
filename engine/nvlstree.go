package engine

import (
	"fmt"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/algorithm"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/kernels"
)

// NVLS_TREE: AllReduce across nodes, NVLS inside each node and NCCL's double binary tree between
// them. Facts from NCCL (src/device/all_reduce.h, the NVLS_TREE Simple kernel; src/graph/connect.cc
// connectNvls; reference §2, §7 and §10):
//   - inside a node it is NVLS AllReduce: every rank scatters each step's nHeads shares of its
//     input into its up buffer of the node's multicast object, and gathers the whole step out of
//     its down buffer;
//   - every rank of a node is a head (nHeads = localRanks), and head h owns share h of every step
//     in every channel (the kernel's offset + headRank*chunkSize): its reduce warps ld_reduce
//     share h across the node (the multicast object is treeDown[0]), add the partial sums of
//     share h received from its tree children, and send the result to its tree parent; its
//     broadcast warps receive the final share from the parent, st it into every member's down
//     buffer (multimem.st) and send it on to the children. At the root the reduce warps st the
//     sum and send it down themselves. So the tree work is spread over the node's ranks by
//     share, not given to one rank per node;
//   - the tree of head h is the double binary tree over the nodes (ncclGetDtree) whose vertex for
//     node k is node k's head h (connectNvls: treeUp = heads[parent], treeDown[1] and [2] =
//     heads[children]); channel c runs on tree c%2;
//   - legality: AllReduce only, Simple only, more than one node (NVLS_TREE is disabled at
//     nNodes == 1), and NVLS's op/dtype rules (ncclNvlsSupported); nodes of equal size, here
//     Config.RanksPerNode dividing n, at least 2 ranks each (NVLS needs 2 GPUs);
//   - the chunk (calcCollChunking): min(nvlsChunkSize, nvlsTreeMaxChunkSize), the tree's maximum
//     being 64 KiB when nNodes >= 4 (else the NVLS chunk), then shrunk to 256K, 128K, 64K and 32K
//     when nBytes is below 32, 16, 4 and 1 times ops*chunk (ops = nChannels*nHeads, nChannels
//     the work piece's, 1), each only when the chunk is still larger.
//
// Per step s of a channel, head h of node k (rank k*rpn+h) runs, on the channel's one goroutine,
// scatter and gather as NVLS does and in between:
//
//	tree-up    every member's posted >= s+1, the children's step s is in their connections, and
//	           the parent's connection has a free slot; ld_reduces share h into that slot, adds
//	           the children's partials and sends it up. At the root: also every member's
//	           done >= s-7 and free slots to the children; it st's the sum into every member's
//	           down buffer, sends it down, and publishes reduced
//	tree-down  (not at the root) the parent's step s is in, every member's done >= s-7 and free
//	           slots to the children; st's the share, sends it down, and publishes reduced
//
// The connections are ordinary point-to-point ones ("conn/C/FROM-TO", Simple, one share per FIFO
// step, which fits: the NVLS step is at most a Simple slot), between ranks of the same local index
// in different nodes; no connection inside a node carries a byte.

// nvlsTreeCheck returns the error of an NVLS_TREE plan that NCCL would not run (see the facts
// above): ErrInvalid, the same on every rank.
func nvlsTreeCheck(n, rpn int, coll costmodel.Coll, dt kernels.Dtype, op kernels.Op, proto costmodel.Proto) error {
	switch {
	case coll != costmodel.AllReduce:
		return fmt.Errorf("%w: NVLS_TREE for %v (NCCL runs it for AllReduce only)", ErrInvalid, coll)
	case proto != costmodel.Simple:
		return fmt.Errorf("%w: NVLS_TREE with %v (NCCL runs NVLS_TREE with Simple only)", ErrInvalid, proto)
	case rpn < 2 || n%rpn != 0 || n/rpn < 2:
		return fmt.Errorf("%w: NVLS_TREE on %d ranks in virtual nodes of %d (it needs at least 2 virtual nodes of the same size, at least 2 ranks each)",
			ErrInvalid, n, rpn)
	case !nvlsOpOK(dt, op):
		return fmt.Errorf("%w: NVLS_TREE %v with %v %v (the switch reduces sum and min/max of 32- and 64-bit integers, float16 and bfloat16, and sum of float32 and float64)",
			ErrInvalid, coll, dt, op)
	}
	return nil
}

// nvlsTreeChunk is NCCL's NVLS_TREE chunk for a call of nBytes (the model byte count): the NVLS
// step, at most 64 KiB on 4 or more nodes, shrunk for small calls as calcCollChunking does.
// planned, when positive, is the planner's chunk (capped at the step).
func (c *Comm) nvlsTreeChunk(nBytes, planned int64) int64 {
	step := int64(c.nvlsStepBytes())
	if planned > 0 {
		return min(planned, step)
	}
	chunk := step
	if c.topo.nNodes >= 4 {
		chunk = min(chunk, 64<<10) // nvlsTreeMaxChunkSize
	}
	ops := int64(c.topo.rpn) // nChannels (the work piece's, 1) x nHeads
	for _, s := range []struct{ mul, to int64 }{{32, 256 << 10}, {16, 128 << 10}, {4, 64 << 10}, {1, 32 << 10}} {
		if nBytes < s.mul*ops*chunk && chunk > s.to {
			chunk = s.to
		}
	}
	return chunk
}

// nvlsTreeLinksFor returns this rank's tree connections on channel ch (tree ch%2 over the nodes,
// between the ranks of this rank's local index), mapping them on first use.
func (c *Comm) nvlsTreeLinksFor(ch int) (*algorithm.NVLSTreeLinks, error) {
	for len(c.nvlsTree) <= ch {
		c.nvlsTree = append(c.nvlsTree, nil)
	}
	if t := c.nvlsTree[ch]; t != nil {
		return t, nil
	}
	rpn := c.topo.rpn
	node, h := c.rank/rpn, c.rank%rpn
	t0, t1 := capabilities.Dtree(c.topo.nNodes, node)
	tn := t0
	if ch%2 == 1 {
		tn = t1
	}
	t := &algorithm.NVLSTreeLinks{}
	pair := func(peer int) (to, from *wire.Endpoint, err error) {
		if to, err = c.endpoint(ch, c.rank, peer); err != nil {
			return nil, nil, err
		}
		from, err = c.endpoint(ch, peer, c.rank)
		return to, from, err
	}
	var err error
	if tn.Parent >= 0 {
		if t.ToUp, t.FromUp, err = pair(tn.Parent*rpn + h); err != nil {
			return nil, err
		}
	}
	for _, k := range []int{tn.Child0, tn.Child1} {
		if k < 0 {
			continue
		}
		if t.ToKids[t.NKids], t.FromKids[t.NKids], err = pair(k*rpn + h); err != nil {
			return nil, err
		}
		t.NKids++
	}
	c.nvlsTree[ch] = t
	return t, nil
}
