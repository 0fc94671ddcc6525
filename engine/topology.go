package engine

import (
	"github.com/collplan/collplan/capabilities"
)

// Virtual nodes. Consecutive ranks are grouped into nodes of ranksPerNode ranks (the last node may
// have fewer): node k holds ranks [k*rpn, min((k+1)*rpn, n)). Rings visit the nodes in order and
// the ranks of a node contiguously; trees are NCCL's double binary tree over the nodes with a chain
// inside each node.
type vtopo struct {
	n, rpn, nNodes int
}

func newVtopo(n, rpn int) vtopo {
	if rpn <= 0 || rpn > n {
		rpn = n
	}
	return vtopo{n: n, rpn: rpn, nNodes: (n + rpn - 1) / rpn}
}

// nodeRanks returns node k's ranks [lo, hi).
func (t vtopo) nodeRanks(k int) (lo, hi int) { return k * t.rpn, min((k+1)*t.rpn, t.n) }

// ring returns channel ch's ring: ring[i+1] follows ring[i]. Each channel has its own order, as
// NCCL's graph search gives each channel its own: inside every node the local ranks are rotated by
// the channel index (so each channel enters and leaves a node through different ranks), and odd
// channels run the ring in the opposite direction.
func (t vtopo) ring(ch int) []int {
	r := make([]int, 0, t.n)
	for k := 0; k < t.nNodes; k++ {
		lo, hi := t.nodeRanks(k)
		m := hi - lo
		for i := 0; i < m; i++ {
			r = append(r, lo+(i+ch)%m)
		}
	}
	if ch%2 == 1 {
		for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
			r[i], r[j] = r[j], r[i]
		}
	}
	return r
}

// trees returns every rank's links in tree 0 and tree 1: NCCL's ncclTopoPreset + connectTrees
// with the tree pattern and local rank order as the intra-node order. Inside a node the ranks form a
// chain (local i: up = local i-1, down[0] = local i+1); the node's first rank is its head, and
// takes the inter-node parent (the parent node's head) and children (the child nodes' heads, child0
// then child1, after the chain link) of capabilities.Dtree over the nodes. It equals
// capabilities.DoubleTree when n is a multiple of ranksPerNode, and extends it to a smaller last
// node.
func (t vtopo) trees() (tree0, tree1 []capabilities.TreeLinks) {
	tree0 = make([]capabilities.TreeLinks, t.n)
	tree1 = make([]capabilities.TreeLinks, t.n)
	for k := 0; k < t.nNodes; k++ {
		t0, t1 := capabilities.Dtree(t.nNodes, k)
		t.chain(tree0, k, t0)
		t.chain(tree1, k, t1)
	}
	return tree0, tree1
}

func (t vtopo) chain(links []capabilities.TreeLinks, k int, tn capabilities.TreeNode) {
	lo, hi := t.nodeRanks(k)
	for r := lo; r < hi; r++ {
		l := capabilities.TreeLinks{Up: -1, Down: [3]int{-1, -1, -1}}
		if r > lo {
			l.Up = r - 1
		}
		if r < hi-1 {
			l.Down[0] = r + 1
		}
		links[r] = l
	}
	h := &links[lo]
	if tn.Parent != -1 {
		h.Up = tn.Parent * t.rpn
	}
	for _, c := range []int{tn.Child0, tn.Child1} {
		if c == -1 {
			continue
		}
		for x := range h.Down {
			if h.Down[x] == -1 {
				h.Down[x] = c * t.rpn
				break
			}
		}
	}
}
