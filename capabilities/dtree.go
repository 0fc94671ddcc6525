package capabilities

import (
	"fmt"
	"math/bits"
)

// NCCL's double binary tree (src/graph/trees.cc and the tree part of src/graph/connect.cc), as
// reference/nccl-costmodel.md §11 describes it. The trees are built over node indices; inside a
// node the local ranks form a chain.

// TreeNode is one node's place in a binary tree: Parent and children are node indices or -1;
// ChildType is the parentChildType NCCL returns (-1 when unset, e.g. at the root of tree 0).
// ChildType 0 means the node is below its parent (node < parent), 1 that it is above.
type TreeNode struct{ Parent, Child0, Child1, ChildType int }

// noTreeNode is what Btree and Dtree return for out-of-range input: no parent, no children.
var noTreeNode = TreeNode{Parent: -1, Child0: -1, Child1: -1, ChildType: -1}

// Btree returns node r's place in NCCL's binary tree over n nodes (ncclGetBtree, root 0).
//
// With bit the lowest set bit of r: the parent is (r^bit)|(bit<<1), or r^bit when that is >= n;
// child0 is r-bit/2 and child1 the first of r+bit/2, r+bit/4, ... below n. The root has no
// parent, no child0 and child1 = the largest power of two below n.
//
// Callers pass 1 <= n and 0 <= r < n; anything else gets a TreeNode that is all -1 (no parent, no
// children, ChildType unset). Btree never panics and handles n up to math.MaxInt.
func Btree(n, r int) TreeNode {
	if n < 1 || r < 0 || r >= n {
		return noTreeNode
	}
	t := noTreeNode
	un, ur := uint(n), uint(r) // uint: bit<<1 and r+low cannot overflow below 2^64
	if r == 0 {
		if n > 1 {
			// The C loop stops at the smallest power of two >= n; child1 is half of it.
			t.Child1 = int(uint(1) << (bits.Len(un-1) - 1))
		}
		return t
	}
	bit := ur & -ur // lowest set bit; r < n so the C scan finds it
	up := (ur ^ bit) | (bit << 1)
	if up >= un {
		up = ur ^ bit
	}
	t.Parent = int(up)
	if ur < up {
		t.ChildType = 0
	} else {
		t.ChildType = 1
	}
	if low := bit >> 1; low != 0 {
		t.Child0 = int(ur - low)
		for ; low != 0; low >>= 1 {
			if ur+low < un {
				t.Child1 = int(ur + low)
				break
			}
		}
	}
	return t
}

// Dtree returns node r's place in both trees of NCCL's double binary tree over n nodes
// (ncclGetDtree). Tree 0 is Btree(n, r). Tree 1 is, for odd n, tree 0 shifted by one (root 1):
// Btree(n, (r-1+n)%n) with every id x mapped to (x+1)%n; for even n, tree 0 mirrored (root n-1):
// Btree(n, n-1-r) with every id x mapped to n-1-x. Tree 1's ChildType is that Btree call's,
// unchanged.
//
// Callers pass 1 <= n and 0 <= r < n; anything else gets two all -1 TreeNodes.
func Dtree(n, r int) (t0, t1 TreeNode) {
	if n < 1 || r < 0 || r >= n {
		return noTreeNode, noTreeNode
	}
	t0 = Btree(n, r)
	var s int
	var m func(int) int
	if n%2 == 1 {
		s = r - 1
		if r == 0 {
			s = n - 1
		}
		m = func(x int) int { return (x + 1) % n }
	} else {
		s = n - 1 - r
		m = func(x int) int { return n - 1 - x }
	}
	t1 = Btree(n, s)
	for _, p := range []*int{&t1.Parent, &t1.Child0, &t1.Child1} {
		if *p != -1 {
			*p = m(*p)
		}
	}
	return t0, t1
}

// TreeLinks is one rank's neighbours in a tree over the whole communicator, NCCL's ncclTree up and
// down[NCCL_MAX_TREE_ARITY]: -1 where absent. Down is filled from slot 0 without gaps.
type TreeLinks struct {
	Up   int
	Down [3]int
}

// MaxTreeRanks bounds nNodes*ranksPerNode in DoubleTree, so that a bad input cannot ask for an
// allocation that kills the process. NCCL communicators are far smaller.
const MaxTreeRanks = 1 << 20

// DoubleTree returns every rank's up and down ranks in tree 0 and tree 1 for a communicator of
// nNodes nodes with ranksPerNode local ranks each, rank = node*ranksPerNode + local. tree0[rank]
// and tree1[rank] are the links of that rank.
//
// This is what NCCL's ncclTopoPreset and connectTrees build with the NCCL_TOPO_PATTERN_TREE pattern
// and the intra-node order equal to local rank order:
//   - inside a node the local ranks form a chain: local i has up = local i-1 (none for i = 0) and
//     down[0] = local i+1 (none for the last);
//   - local 0 of each node is its head for the parent and for both children: it gets up = the
//     parent node's local 0, and the child nodes' local 0 (child0 first, then child1) are appended
//     to its down[] after the chain link, as setTreeDown does.
//
// Tree 1 is the same chain under Dtree's tree 1. DoubleTree returns an error when nNodes < 1,
// ranksPerNode < 1 or nNodes*ranksPerNode > MaxTreeRanks; it never panics.
func DoubleTree(nNodes, ranksPerNode int) (tree0, tree1 []TreeLinks, err error) {
	if nNodes < 1 || ranksPerNode < 1 {
		return nil, nil, fmt.Errorf("capabilities: double tree needs nNodes >= 1 and ranksPerNode >= 1, got %d and %d",
			nNodes, ranksPerNode)
	}
	if nNodes > MaxTreeRanks/ranksPerNode {
		return nil, nil, fmt.Errorf("capabilities: double tree of %d nodes x %d ranks exceeds %d ranks",
			nNodes, ranksPerNode, MaxTreeRanks)
	}
	nRanks := nNodes * ranksPerNode
	tree0 = make([]TreeLinks, nRanks)
	tree1 = make([]TreeLinks, nRanks)
	for node := 0; node < nNodes; node++ {
		t0, t1 := Dtree(nNodes, node)
		chain(tree0, node, ranksPerNode, t0)
		chain(tree1, node, ranksPerNode, t1)
	}
	return tree0, tree1, nil
}

// chain fills the links of node's ranks in one tree: the intra-node chain, then the head's
// inter-node edges from t (node indices, mapped to each node's local rank 0).
func chain(links []TreeLinks, node, ranksPerNode int, t TreeNode) {
	head := node * ranksPerNode
	for i := 0; i < ranksPerNode; i++ {
		l := TreeLinks{Up: -1, Down: [3]int{-1, -1, -1}}
		if i > 0 {
			l.Up = head + i - 1
		}
		if i < ranksPerNode-1 {
			l.Down[0] = head + i + 1
		}
		links[head+i] = l
	}
	h := &links[head]
	if t.Parent != -1 {
		h.Up = t.Parent * ranksPerNode
	}
	for _, c := range []int{t.Child0, t.Child1} {
		if c == -1 {
			continue
		}
		// At most the chain link and two children: down[] has room (NCCL_MAX_TREE_ARITY 3).
		for x := range h.Down {
			if h.Down[x] == -1 {
				h.Down[x] = c * ranksPerNode
				break
			}
		}
	}
}
