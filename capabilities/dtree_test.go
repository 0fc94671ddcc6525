package capabilities

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dtreeTable is one §11 table: the expected Dtree(n, r) for every r.
type dtreeTable struct {
	n      int
	t0, t1 []TreeNode
}

// readDtreeTable parses testdata/dtree/nN.txt, the §11 markdown table rows copied verbatim.
func readDtreeTable(t *testing.T, path string) dtreeTable {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()

	rows := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows[cells[0]] = cells[1:]
	}
	require.NoError(t, sc.Err())

	num := func(s string) int {
		if s == "-" {
			return -1
		}
		v, err := strconv.Atoi(s)
		require.NoError(t, err, "cell %q in %s", s, path)
		return v
	}
	require.Contains(t, rows, "r", path)
	n := len(rows["r"])
	for i, s := range rows["r"] {
		require.Equal(t, i, num(s), "%s: column %d", path, i)
	}
	tab := dtreeTable{n: n, t0: make([]TreeNode, n), t1: make([]TreeNode, n)}
	for tree, nodes := range map[string][]TreeNode{"t0": tab.t0, "t1": tab.t1} {
		up, kids, typ := rows[tree+" up"], rows[tree+" kids"], rows[tree+" type"]
		require.Len(t, up, n, "%s: %s up", path, tree)
		require.Len(t, kids, n, "%s: %s kids", path, tree)
		require.Len(t, typ, n, "%s: %s type", path, tree)
		for r := 0; r < n; r++ {
			k := strings.Split(kids[r], ",")
			require.Len(t, k, 2, "%s: %s kids of %d", path, tree, r)
			nodes[r] = TreeNode{Parent: num(up[r]), Child0: num(k[0]), Child1: num(k[1]), ChildType: num(typ[r])}
		}
	}
	return tab
}

func TestDtreeReferenceTables(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "dtree", "*.txt"))
	require.NoError(t, err)
	require.Len(t, files, 4, "want the §11 tables for n = 4, 5, 8, 14")
	seen := map[int]bool{}
	for _, path := range files {
		tab := readDtreeTable(t, path)
		seen[tab.n] = true
		t.Run(fmt.Sprintf("n=%d", tab.n), func(t *testing.T) {
			for r := 0; r < tab.n; r++ {
				t0, t1 := Dtree(tab.n, r)
				assert.Equal(t, tab.t0[r], t0, "Dtree(%d, %d) tree 0", tab.n, r)
				assert.Equal(t, tab.t1[r], t1, "Dtree(%d, %d) tree 1", tab.n, r)
				assert.Equal(t, tab.t0[r], Btree(tab.n, r), "Btree(%d, %d)", tab.n, r)
			}
		})
	}
	assert.Equal(t, map[int]bool{4: true, 5: true, 8: true, 14: true}, seen)
}

// cBtree is ncclGetBtree's loop structure as §11 describes it, redundant first iteration included,
// to check that Btree's closed form gives the same answer.
func cBtree(n, r int) TreeNode {
	t := TreeNode{-1, -1, -1, -1}
	bit := 1
	for ; bit < n; bit <<= 1 {
		if bit&r != 0 {
			break
		}
	}
	if r == 0 {
		if n > 1 {
			t.Child1 = bit >> 1
		}
		return t
	}
	up := (r ^ bit) | (bit << 1)
	if up >= n {
		up = r ^ bit
	}
	t.Parent = up
	if r < up {
		t.ChildType = 0
	} else {
		t.ChildType = 1
	}
	low := bit >> 1
	if low != 0 {
		t.Child0 = r - low
	}
	d1 := -1
	if low != 0 {
		d1 = r + low
	}
	for d1 >= n {
		if low == 0 {
			d1 = -1
		} else {
			d1 = r + low
		}
		low >>= 1
	}
	t.Child1 = d1
	return t
}

// checkBinaryTree checks one tree over n nodes given as nodes[r]; it returns the interior nodes.
func checkBinaryTree(t *testing.T, name string, nodes []TreeNode, wantRoot int) map[int]bool {
	t.Helper()
	n := len(nodes)
	roots := 0
	interior := map[int]bool{}
	for r, nd := range nodes {
		if nd.Parent == -1 {
			roots++
			assert.Equal(t, wantRoot, r, "%s: root", name)
			assert.Equal(t, -1, nd.ChildType, "%s: root %d ChildType", name, r)
		} else {
			if !assert.True(t, nd.Parent >= 0 && nd.Parent < n, "%s: parent of %d is %d", name, r, nd.Parent) {
				continue
			}
			p := nodes[nd.Parent]
			// ChildType tells connectTrees which of the parent's child heads to use.
			switch nd.ChildType {
			case 0:
				assert.Equal(t, r, p.Child0, "%s: %d has ChildType 0 but parent %d's child0 is %d", name, r, nd.Parent, p.Child0)
			case 1:
				assert.Equal(t, r, p.Child1, "%s: %d has ChildType 1 but parent %d's child1 is %d", name, r, nd.Parent, p.Child1)
			default:
				t.Errorf("%s: %d has parent %d and ChildType %d", name, r, nd.Parent, nd.ChildType)
			}
		}
		for _, c := range []int{nd.Child0, nd.Child1} {
			if c == -1 {
				continue
			}
			interior[r] = true
			if assert.True(t, c >= 0 && c < n, "%s: child of %d is %d", name, r, c) {
				assert.Equal(t, r, nodes[c].Parent, "%s: %d lists child %d whose parent is %d", name, r, c, nodes[c].Parent)
			}
		}
		if nd.Child0 != -1 {
			assert.NotEqual(t, nd.Child0, nd.Child1, "%s: %d has the same child twice", name, r)
		}
	}
	assert.Equal(t, 1, roots, "%s: roots", name)
	// Acyclic and connected: every node reaches the root in fewer than n steps.
	for r := range nodes {
		x, steps := r, 0
		for x != -1 && x >= 0 && x < n && nodes[x].Parent != -1 && steps < n {
			x = nodes[x].Parent
			steps++
		}
		assert.Equal(t, wantRoot, x, "%s: following parents from %d", name, r)
		assert.Less(t, steps, n, "%s: cycle above %d", name, r)
	}
	return interior
}

func TestDtreeProperties(t *testing.T) {
	for n := 1; n <= 1024; n++ {
		t0s, t1s := make([]TreeNode, n), make([]TreeNode, n)
		for r := 0; r < n; r++ {
			t0s[r], t1s[r] = Dtree(n, r)
			require.Equal(t, cBtree(n, r), Btree(n, r), "Btree(%d, %d) against the C loop", n, r)
			require.Equal(t, t0s[r], Btree(n, r), "Dtree(%d, %d) tree 0", n, r)
		}
		root1 := n - 1
		if n%2 == 1 {
			root1 = 1 % n
		}
		in0 := checkBinaryTree(t, fmt.Sprintf("n=%d tree 0", n), t0s, 0)
		in1 := checkBinaryTree(t, fmt.Sprintf("n=%d tree 1", n), t1s, root1)
		if n%2 == 0 {
			for x := range in0 {
				assert.False(t, in1[x], "n=%d: node %d is interior in both trees", n, x)
			}
		}
		if t.Failed() {
			t.Fatalf("stopping at n=%d", n)
		}
	}
}

func TestBtreeInvalidAndLarge(t *testing.T) {
	none := TreeNode{-1, -1, -1, -1}
	for _, c := range []struct{ n, r int }{{0, 0}, {-1, 0}, {4, -1}, {4, 4}, {1, 1}, {math.MinInt, 0}, {5, math.MaxInt}} {
		assert.Equal(t, none, Btree(c.n, c.r), "Btree(%d, %d)", c.n, c.r)
		t0, t1 := Dtree(c.n, c.r)
		assert.Equal(t, none, t0, "Dtree(%d, %d) tree 0", c.n, c.r)
		assert.Equal(t, none, t1, "Dtree(%d, %d) tree 1", c.n, c.r)
	}
	assert.Equal(t, none, Btree(1, 0), "a single node is a bare root")

	const big = math.MaxInt
	assert.Equal(t, TreeNode{-1, -1, 1 << 62, -1}, Btree(big, 0))
	// Parent (r^bit)|(bit<<1) = 2^63 does not fit, so the parent is r^bit = 0.
	assert.Equal(t, TreeNode{0, 1 << 61, 1<<62 + 1<<61, 1}, Btree(big, 1<<62))
	assert.Equal(t, TreeNode{big - 3, big - 2, -1, 1}, Btree(big, big-1), "child1 r+1 = MaxInt is past the end")
	t0, t1 := Dtree(big, big-1)
	assert.Equal(t, Btree(big, big-1), t0)
	// Odd n: Btree(n, n-2) has parent n-1, which the shift maps to 0.
	assert.Equal(t, TreeNode{0, -1, -1, 0}, t1)
	t0, t1 = Dtree(big-1, 0)
	assert.Equal(t, Btree(big-1, 0), t0)
	// Even n: Btree(n, n-1) has parent n-3 (n-1 | 2 = n is past the end), mirrored to 1.
	assert.Equal(t, TreeNode{1, -1, -1, 1}, t1)
}

func TestDoubleTreeExamples(t *testing.T) {
	l := func(up int, down ...int) TreeLinks {
		tl := TreeLinks{Up: up, Down: [3]int{-1, -1, -1}}
		copy(tl.Down[:], down)
		return tl
	}
	tests := []struct {
		name         string
		nNodes, ppn  int
		tree0, tree1 []TreeLinks
	}{
		{"1x1", 1, 1, []TreeLinks{l(-1)}, []TreeLinks{l(-1)}},
		{"1x4 chain", 1, 4,
			[]TreeLinks{l(-1, 1), l(0, 2), l(1, 3), l(2)},
			[]TreeLinks{l(-1, 1), l(0, 2), l(1, 3), l(2)}},
		{"2x1", 2, 1, []TreeLinks{l(-1, 1), l(0)}, []TreeLinks{l(1), l(-1, 0)}},
		// Tree 0: 0 -> 2 -> {1, 3}; tree 1: 3 -> 1 -> {2, 0} (node indices, §11 n = 4).
		{"4x1", 4, 1,
			[]TreeLinks{l(-1, 2), l(2), l(0, 1, 3), l(2)},
			[]TreeLinks{l(1), l(3, 2, 0), l(1), l(-1, 1)}},
		{"4x2", 4, 2,
			[]TreeLinks{l(-1, 1, 4), l(0), l(4, 3), l(2), l(0, 5, 2, 6), l(4), l(4, 7), l(6)},
			[]TreeLinks{l(2, 1), l(0), l(6, 3, 4, 0), l(2), l(2, 5), l(4), l(-1, 7, 2), l(6)}},
		// n = 3, tree 0: 0 -child1-> 2 -child0-> 1; tree 1 (shifted): 1 -child1-> 0 -child0-> 2.
		{"3x2", 3, 2,
			[]TreeLinks{l(-1, 1, 4), l(0), l(4, 3), l(2), l(0, 5, 2), l(4)},
			[]TreeLinks{l(2, 1, 4), l(0), l(-1, 3, 0), l(2), l(0, 5), l(4)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t0, t1, err := DoubleTree(tc.nNodes, tc.ppn)
			require.NoError(t, err)
			assert.Equal(t, tc.tree0, t0, "tree 0")
			assert.Equal(t, tc.tree1, t1, "tree 1")
		})
	}
}

func TestDoubleTreeInvalid(t *testing.T) {
	for _, c := range []struct{ nNodes, ppn int }{
		{0, 1}, {1, 0}, {-1, 8}, {8, -1}, {math.MinInt, math.MinInt},
		{math.MaxInt, math.MaxInt}, {math.MaxInt, 2}, {MaxTreeRanks + 1, 1}, {MaxTreeRanks/8 + 1, 8},
	} {
		var t0, t1 []TreeLinks
		var err error
		require.NotPanics(t, func() { t0, t1, err = DoubleTree(c.nNodes, c.ppn) }, "DoubleTree(%d, %d)", c.nNodes, c.ppn)
		assert.Error(t, err, "DoubleTree(%d, %d)", c.nNodes, c.ppn)
		assert.Nil(t, t0)
		assert.Nil(t, t1)
	}
	t0, t1, err := DoubleTree(MaxTreeRanks, 1)
	require.NoError(t, err, "exactly MaxTreeRanks is allowed")
	assert.Len(t, t0, MaxTreeRanks)
	assert.Len(t, t1, MaxTreeRanks)
}

// checkRankTree checks that links is one tree spanning all ranks.
func checkRankTree(t *testing.T, name string, links []TreeLinks) {
	t.Helper()
	n := len(links)
	roots, root := 0, -1
	for r, l := range links {
		if l.Up == -1 {
			roots++
			root = r
		} else if assert.True(t, l.Up >= 0 && l.Up < n && l.Up != r, "%s: up of %d is %d", name, r, l.Up) {
			assert.Contains(t, links[l.Up].Down[:], r, "%s: %d's up %d does not list it in down", name, r, l.Up)
		}
		gap := false
		for _, d := range l.Down {
			if d == -1 {
				gap = true
				continue
			}
			assert.False(t, gap, "%s: %d's down %v has a hole", name, r, l.Down)
			if assert.True(t, d >= 0 && d < n, "%s: down of %d is %d", name, r, d) {
				assert.Equal(t, r, links[d].Up, "%s: %d lists %d in down, whose up is %d", name, r, d, links[d].Up)
			}
		}
	}
	require.Equal(t, 1, roots, "%s: roots", name)
	for r := range links {
		x, steps := r, 0
		for links[x].Up != -1 && steps < n {
			x = links[x].Up
			steps++
		}
		assert.Equal(t, root, x, "%s: following up from %d", name, r)
	}
}

func TestDoubleTreeProperties(t *testing.T) {
	for nNodes := 1; nNodes <= 33; nNodes++ {
		for ppn := 1; ppn <= 8; ppn++ {
			t0, t1, err := DoubleTree(nNodes, ppn)
			require.NoError(t, err)
			require.Len(t, t0, nNodes*ppn)
			require.Len(t, t1, nNodes*ppn)
			name := fmt.Sprintf("%dx%d", nNodes, ppn)
			checkRankTree(t, name+" tree 0", t0)
			checkRankTree(t, name+" tree 1", t1)
			// The roots are the heads (local 0) of Dtree's root nodes.
			assert.Equal(t, -1, t0[0].Up, name)
			root1 := nNodes - 1
			if nNodes%2 == 1 {
				root1 = 1 % nNodes
			}
			assert.Equal(t, -1, t1[root1*ppn].Up, name)
			// Non-head ranks only ever link inside their node.
			for r := range t0 {
				if r%ppn == 0 {
					continue
				}
				for _, tr := range [][]TreeLinks{t0, t1} {
					assert.Equal(t, r-1, tr[r].Up, "%s: rank %d", name, r)
					assert.Equal(t, -1, tr[r].Down[1], "%s: rank %d", name, r)
				}
			}
			if t.Failed() {
				t.Fatalf("stopping at %s", name)
			}
		}
	}
}
