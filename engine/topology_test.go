package engine

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
)

// TestTreesMatchDoubleTree: with whole nodes, the engine's trees are capabilities.DoubleTree
// (NCCL's connectTrees over ncclGetDtree with chains inside the nodes).
func TestTreesMatchDoubleTree(t *testing.T) {
	for nNodes := 1; nNodes <= 9; nNodes++ {
		for rpn := 1; rpn <= 4; rpn++ {
			want0, want1, err := capabilities.DoubleTree(nNodes, rpn)
			require.NoError(t, err)
			got0, got1 := newVtopo(nNodes*rpn, rpn).trees()
			assert.Equal(t, want0, got0, "tree 0, %d nodes x %d", nNodes, rpn)
			assert.Equal(t, want1, got1, "tree 1, %d nodes x %d", nNodes, rpn)
		}
	}
}

// TestTreesAreTrees: for every n up to 20 and every ranks-per-node (a smaller last node
// included), each tree has one root and consistent parent and child links, reaches every rank,
// and joins nodes only through their heads; with more than one node the two trees have different
// roots.
func TestTreesAreTrees(t *testing.T) {
	for n := 1; n <= 20; n++ {
		for rpn := 1; rpn <= n; rpn++ {
			vt := newVtopo(n, rpn)
			t0, t1 := vt.trees()
			for ti, tree := range [][]capabilities.TreeLinks{t0, t1} {
				name := fmt.Sprintf("n=%d rpn=%d tree %d", n, rpn, ti)
				roots := 0
				root := -1
				for r, l := range tree {
					if l.Up < 0 {
						roots++
						root = r
						continue
					}
					assert.Contains(t, tree[l.Up].Down[:], r, "%s: rank %d's parent %d lists it", name, r, l.Up)
					if l.Up/rpn != r/rpn {
						assert.Zero(t, r%rpn, "%s: rank %d has an inter-node parent but is not its node's head", name, r)
						assert.Zero(t, l.Up%rpn, "%s: rank %d's inter-node parent %d is not a head", name, r, l.Up)
					}
				}
				require.Equal(t, 1, roots, name)
				for r, l := range tree {
					for _, k := range l.Down {
						if k >= 0 {
							assert.Equal(t, r, tree[k].Up, "%s: child %d of %d", name, k, r)
						}
					}
				}
				seen := map[int]bool{}
				stack := []int{root}
				for len(stack) > 0 {
					r := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					require.False(t, seen[r], "%s: cycle at %d", name, r)
					seen[r] = true
					for _, k := range tree[r].Down {
						if k >= 0 {
							stack = append(stack, k)
						}
					}
				}
				assert.Len(t, seen, n, name)
			}
			if vt.nNodes > 1 {
				r0, r1 := -1, -1
				for r := range t0 {
					if t0[r].Up < 0 {
						r0 = r
					}
					if t1[r].Up < 0 {
						r1 = r
					}
				}
				assert.NotEqual(t, r0, r1, "n=%d rpn=%d: the two trees have different roots", n, rpn)
			}
		}
	}
}

// TestRings: every channel's ring is a permutation that visits each node's ranks contiguously,
// and channels differ in order.
func TestRings(t *testing.T) {
	for n := 1; n <= 12; n++ {
		for rpn := 1; rpn <= n; rpn++ {
			vt := newVtopo(n, rpn)
			var rings [][]int
			for ch := 0; ch < 4; ch++ {
				r := vt.ring(ch)
				s := slices.Clone(r)
				slices.Sort(s)
				for i := range s {
					require.Equal(t, i, s[i], "n=%d rpn=%d ch=%d: %v is not a permutation", n, rpn, ch, r)
				}
				changes := 0
				for i := 1; i < n; i++ {
					if r[i]/rpn != r[i-1]/rpn {
						changes++
					}
				}
				assert.Equal(t, vt.nNodes-1, changes, "n=%d rpn=%d ch=%d: %v visits nodes contiguously", n, rpn, ch, r)
				rings = append(rings, r)
			}
			if n > 2 {
				assert.NotEqual(t, rings[0], rings[1], "n=%d rpn=%d", n, rpn)
			}
		}
	}
}
