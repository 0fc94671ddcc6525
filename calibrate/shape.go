package calibrate

import "fmt"

// Where a sweep's shape comes from (Sweep.ShapeSource, SweepShape).
const (
	ShapeFromRankLines = "rank lines"      // the "# Rank N ... on HOST" lines: ranks per distinct host
	ShapeFromManifest  = "manifest"        // the manifest entry's nodes and gpus_per_node
	ShapeFromFlag      = "--gpus-per-node" // nothing in the file or the manifest: the flag
)

// Shape is a communicator's shape: Nodes nodes of RanksPerNode ranks each. A fitted value belongs
// to the shape it was measured on.
type Shape struct {
	Nodes        int `json:"nodes"`
	RanksPerNode int `json:"ranks_per_node"`
}

// Ranks is Nodes * RanksPerNode.
func (s Shape) Ranks() int { return s.Nodes * s.RanksPerNode }

// String is "2 nodes x 4 ranks per node (8 ranks)", "1 node x 1 rank per node (1 rank)".
func (s Shape) String() string {
	return fmt.Sprintf("%s x %s per node (%s)", plural(s.Nodes, "node"), plural(s.RanksPerNode, "rank"), plural(s.Ranks(), "rank"))
}

// SweepShape is the shape sweep s ran at and what gave it: its rank lines (Ranks counted, Nodes
// the distinct hosts, RanksPerNode their ratio when every host has the same count), else its
// manifest entry (gpus_per_node, nodes), else flagRPN (--gpus-per-node; 0: not given), else an
// error naming the file. Nodes is 0 when nothing names the node count (the caller's --nodes
// applies). Rank lines that spread the ranks unevenly over the hosts, with nothing else to say,
// are an error too: such a communicator has no one ranks per node.
func SweepShape(s *Sweep, flagRPN int) (Shape, string, error) {
	sh := Shape{Nodes: s.Nodes, RanksPerNode: s.GPUsPerNode}
	switch {
	case s.ShapeSource != "" && sh.RanksPerNode > 0:
		return sh, s.ShapeSource, nil
	case flagRPN > 0:
		return Shape{Nodes: s.Nodes, RanksPerNode: flagRPN}, ShapeFromFlag, nil
	case s.Ranks > 0 && s.Nodes > 0:
		return sh, "", Problem{File: s.File, Line: s.Line, Msg: fmt.Sprintf(
			"its rank lines spread %d ranks unevenly over %d hosts, and no manifest gpus_per_node says the ranks per node; give --gpus-per-node N",
			s.Ranks, s.Nodes)}
	}
	return sh, "", Problem{File: s.File, Line: s.Line, Msg: "nothing gives the ranks per node (no \"# Rank\" lines, no gpus_per_node in a manifest); give --gpus-per-node N"}
}

// CheckShape checks that sweep s, at its shape (SweepShape), can be fitted at shape want, whose
// ranks per node come from wantFrom ("h100.toml's gpus_per_node", "--gpus-per-node 4"). A sweep
// at another node count is not checked (Points skips it with a warning). A mismatch is an error
// naming the file, both shapes and fix(r), what would fit the sweep at its own r ranks per node
// (nil: "give --gpus-per-node r to fit it at its own shape").
func CheckShape(s *Sweep, flagRPN int, want Shape, wantFrom string, fix func(rpn int) string) (Shape, error) {
	sh, from, err := SweepShape(s, flagRPN)
	if err != nil {
		return sh, err
	}
	if sh.Nodes == 0 {
		sh.Nodes = want.Nodes
	}
	if sh.Nodes != want.Nodes || sh.RanksPerNode == want.RanksPerNode {
		return sh, nil
	}
	if fix == nil {
		fix = func(rpn int) string { return fmt.Sprintf("give --gpus-per-node %d to fit it at its own shape", rpn) }
	}
	return sh, Problem{File: s.File, Line: s.Line, Msg: fmt.Sprintf("the sweep ran on %s (from its %s), the fit is for %s (%s); %s",
		sh, from, want, wantFrom, fix(sh.RanksPerNode))}
}
