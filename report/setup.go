package report

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/node"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/tables"
)

// Spec chooses a topology the way planner explain's flags do: exactly one of Node (an embedded
// node table), Table (a node table file) or Topology (a topology file), then the shape and the
// NCCL_ALGO/NCCL_PROTO filters.
type Spec struct {
	Node, Table, Topology string
	// TopologyData, when not nil, is the content of the file Topology names, read already.
	TopologyData []byte
	// Loaded, when not nil, is the node table already decoded (an upload, or a table with an
	// uploaded overlay applied); Node or Table then only names it.
	Loaded *tables.Node
	// Fabric is a fabric table (an embedded name or a FILE.toml) composed into the node table.
	Fabric string
	// Nodes is the node count of a node table (NodesGiven: set explicitly, an error with Topology).
	Nodes      int
	NodesGiven bool
	// GPUsPerNode is the ranks per node instead of the table's (0: the table's).
	GPUsPerNode      int
	GPUsPerNodeGiven bool
	Algo, Proto      string
	NoOverlay        bool
	// Release is the NCCL release whose model prices (planner explain --nccl); the zero value is
	// costmodel.Latest, and the outputs name a release only when one is given.
	Release costmodel.Release
}

// FieldError is bad input in one field of a Spec. Field is the planner command's flag name
// without its dashes ("nodes", "gpus-per-node", "fabric", "topology"); the message is the
// command's.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field string, err error) error { return &FieldError{Field: field, Err: err} }

func fieldf(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Setup is a built topology with what explains it.
type Setup struct {
	Topo      capabilities.Topology
	Source    string   // "node h100 x2", "topology FILE"
	Estimated []string // estimated inputs of the node table, or the topology file's "# estimate" keys
	Node      *tables.Node
	Embedded  bool           // Node is an embedded table, so its overlay is too
	NoOverlay bool           // Node is the table alone, without its fitted overlay
	Fabric    *tables.Fabric // composed into Node (tables.WithFabric); nil when none
	Assumed   Assumed
	// Release is Spec.Release: the NCCL release whose model prices (zero: costmodel.Latest).
	Release costmodel.Release
}

// Assumed is what a topology built from a node table took for granted: its ranks per node and
// where they came from, and the [scale.N] whose graphs it used.
type Assumed struct {
	GPN       int
	GPNSource string // "table", "flag" or "topology"
	GPNText   string // "8 (h100.toml's gpus_per_node)"
	Scale     string // the [scale.N] key; "" for a topology file
	StandsIn  bool   // Scale is not the node count's own
	Graphs    string // "scale 4 stands in for 4096 nodes (no [scale.4096])"
}

// AssumedLine is what map and compare print after "assumed: ": "gpus per node 8 (h100.toml's
// gpus_per_node); graphs: scale 4 stands in for 4096 nodes (no [scale.4096])".
func (s *Setup) AssumedLine() string {
	return fmt.Sprintf("gpus per node %s; graphs: %s", s.Assumed.GPNText, s.Assumed.Graphs)
}

// assume describes the shape of s's topology: for a node table, its ranks per node (gpnFlag, else
// the table's) and the scale whose graphs stood in (capabilities.NodeScaleKey).
func assume(s *Setup, gpnFlag int) Assumed {
	if s.Node == nil {
		return Assumed{GPN: s.Topo.LocalRanks, GPNSource: "topology",
			GPNText: fmt.Sprintf("%d (the topology file's local_ranks)", s.Topo.LocalRanks), Graphs: "the topology file's"}
	}
	a := Assumed{GPN: s.Node.Node.GPUsPerNode, GPNSource: "table",
		GPNText: fmt.Sprintf("%d (%s's gpus_per_node)", s.Node.Node.GPUsPerNode, filepath.Base(s.Node.File))}
	if gpnFlag > 0 {
		a.GPN, a.GPNSource = gpnFlag, "flag"
		a.GPNText = fmt.Sprintf("%d (--gpus-per-node; the table says %d)", gpnFlag, s.Node.Node.GPUsPerNode)
	}
	nodes := s.Topo.NNodes
	a.Scale = capabilities.NodeScaleKey(nodes)
	a.Graphs = fmt.Sprintf("scale %s (%s)", a.Scale, Plural(nodes, "node"))
	if a.Scale != strconv.Itoa(nodes) {
		a.StandsIn = true
		a.Graphs = fmt.Sprintf("scale %s stands in for %s (no [scale.%d])", a.Scale, Plural(nodes, "node"), nodes)
	}
	if table := s.Node.Node.GPUsPerNode; a.GPN != table && !s.Node.Node.IsCPU() {
		// The table's graphs are NCCL's search at its own ranks per node; NCCL searches a node of
		// another size again (4 H100s of an NVSwitch host: 24 ring channels at 15 GB/s where 8
		// give 16 at 20, NCCL 2.29.2's init lines in waynehacking8/nccl-collectives-bench).
		a.Graphs += fmt.Sprintf(", searched at the table's %d GPUs per node: NCCL searches %d again, and its channels and speeds can differ (--topology gives them", table, a.GPN)
		if shaped := fmt.Sprintf("%s-%d", s.Node.Name, a.GPN); slices.Contains(tables.Names(), shaped) {
			a.Graphs += fmt.Sprintf("; --node %s is this node at %d", shaped, a.GPN)
		}
		a.Graphs += ")"
	}
	return a
}

// Build resolves the topology: a topology file, or a node table at Nodes; then env from lookupEnv
// (the process's, for the commands; nothing, for the service), overridden by the file's [env],
// overridden by Algo/Proto. Every error is bad input; a *FieldError names the field.
func Build(sp Spec, lookupEnv func(string) (string, bool)) (*Setup, error) {
	set := 0
	for _, s := range []string{sp.Node, sp.Table, sp.Topology} {
		if s != "" {
			set++
		}
	}
	if set != 1 {
		return nil, fieldf("node", "give exactly one of --node, --table or --topology")
	}
	s := &Setup{}
	var err error
	switch {
	case sp.Topology != "":
		if sp.NodesGiven {
			return nil, fieldf("nodes", "--nodes applies to --node or --table, not --topology (set n_nodes in the file)")
		}
		if sp.GPUsPerNodeGiven {
			return nil, fieldf("gpus-per-node", "--gpus-per-node applies to --node or --table, not --topology (set n_ranks and local_ranks in the file)")
		}
		if sp.NoOverlay {
			return nil, fieldf("no-overlay", "--no-overlay applies to --node or --table, not --topology (a topology file has no overlay)")
		}
		if sp.Fabric != "" {
			return nil, fieldf("fabric", "--fabric applies to --node or --table, not --topology (set the graphs' inter-node values in the file)")
		}
		if sp.TopologyData != nil {
			if s.Topo, err = capabilities.DecodeTopology(sp.Topology, sp.TopologyData); err == nil {
				s.Estimated = capabilities.TopologyEstimates(sp.TopologyData)
			}
		} else {
			s.Topo, s.Estimated, err = capabilities.LoadTopologyEstimates(sp.Topology)
		}
		if err != nil {
			return nil, fieldErr("topology", err)
		}
		s.Source = "topology " + sp.Topology
	default:
		if sp.Nodes < 1 {
			return nil, fieldf("nodes", "--nodes %d: must be at least 1", sp.Nodes)
		}
		if sp.GPUsPerNodeGiven && sp.GPUsPerNode < 1 {
			return nil, fieldf("gpus-per-node", "--gpus-per-node %d: must be at least 1", sp.GPUsPerNode)
		}
		if s.Node = sp.Loaded; s.Node == nil {
			s.Node, err = LoadNode(sp.Node, sp.Table, sp.NoOverlay)
		}
		s.Embedded, s.NoOverlay = sp.Node != "", sp.NoOverlay
		if err != nil {
			if sp.Node != "" {
				return nil, fieldErr("node", err)
			}
			return nil, fieldErr("table", err)
		}
		if s.Node, s.Fabric, err = WithFabric(s.Node, sp.Fabric); err != nil {
			return nil, fieldErr("fabric", err)
		}
		if s.Topo, err = capabilities.FromNodeShape(s.Node, sp.Nodes, sp.GPUsPerNode); err != nil {
			return nil, fieldErr("nodes", err)
		}
		s.Source = fmt.Sprintf("node %s x%d", s.Node.Name, sp.Nodes)
		if s.Fabric != nil {
			s.Source += " fabric " + s.Fabric.Name
		}
		s.Estimated = usedEstimates(s.Node.Estimated(), capabilities.NodeScaleKey(sp.Nodes))
	}
	s.Assumed = assume(s, sp.GPUsPerNode)
	s.Release = sp.Release
	var flags capabilities.Env
	if sp.Algo != "" {
		flags.Algo = capabilities.Setting{Value: sp.Algo, Source: capabilities.SourceFlag}
	}
	if sp.Proto != "" {
		flags.Proto = capabilities.Setting{Value: sp.Proto, Source: capabilities.SourceFlag}
	}
	flags.Overlay(s.Topo.Env)
	if lookupEnv != nil {
		flags.Overlay(capabilities.EnvFromProcess(lookupEnv))
	}
	s.Topo.Env = flags
	return s, nil
}

// ReleaseName is the NCCL release the outputs name: "" when none was given (2.30.7, by default),
// else its version ("2.26.2", "master").
func (s *Setup) ReleaseName() string {
	if s.Release.IsZero() {
		return ""
	}
	return s.Release.String()
}

// NoEnv is the environment of the service: no variable is set.
func NoEnv(string) (string, bool) { return "", false }

// LoadNode loads the embedded table name or else the table file, with its fitted overlay unless
// noOverlay.
func LoadNode(name, file string, noOverlay bool) (*tables.Node, error) {
	switch {
	case name != "" && noOverlay:
		return tables.LoadBase(name)
	case name != "":
		return tables.Load(name)
	case noOverlay:
		return tables.LoadFileBase(file)
	}
	return tables.LoadFile(file)
}

// WithFabric composes the fabric table name (an embedded name or a FILE.toml) into the node table
// n (tables.WithFabric); with name "" it returns n unchanged. Errors start "--fabric: " and name
// the fabric file and key.
func WithFabric(n *tables.Node, name string) (*tables.Node, *tables.Fabric, error) {
	if name == "" {
		return n, nil, nil
	}
	f, err := tables.ResolveFabric(name)
	if err != nil {
		return nil, nil, fmt.Errorf("--fabric: %w", err)
	}
	c, err := tables.WithFabric(n, f)
	if err != nil {
		return nil, nil, fmt.Errorf("--fabric: %w", err)
	}
	return c, f, nil
}

// FabricLine is what the commands print after "fabric: ": the fabric file and where it applied.
func FabricLine(f *tables.Fabric, nNodes int) string {
	if nNodes <= 1 {
		return f.File + ": not applied (1 node: no inter-node hop)"
	}
	return f.File + ": inter-node bw_inter, type_inter, latency_inter and net_device_type (" + f.Fabric.Description + ")"
}

// OverlayLine says what became of the node table's fitted overlay, for the commands that print it
// in a header (map, compare, after "overlay: ") or on stderr (query, compile): DescribeOverlay of
// the planner's overlay; "" when none applied.
func (s *Setup) OverlayLine(pl *planner.Planner) string {
	ov := pl.Overlay()
	if ov == nil || ov.File == "" {
		return ""
	}
	return DescribeOverlay(ov, s.Embedded)
}

// DescribeOverlay is what explain prints after "overlay: ": the file, whether it is embedded, how
// many fitted cells applied, and which did not and why.
func DescribeOverlay(ov *planner.Overlay, embedded bool) string {
	var b strings.Builder
	b.WriteString(ov.File)
	if embedded {
		b.WriteString(" (embedded)")
	}
	n := ov.Applied + len(ov.Skipped)
	if n == 0 {
		b.WriteString(": no fitted cell at this node count")
		return b.String()
	}
	fmt.Fprintf(&b, ": %d of %d fitted cells applied", ov.Applied, n)
	if note := ov.Note(); note != "" {
		_, rest, _ := strings.Cut(note, " not applied: ")
		b.WriteString("; not applied: " + rest)
	}
	return b.String()
}

// Planner builds the planner over the topology, with what the node table implies
// (node.PlannerConfig: its constants, corrections and fitted cells at this node count) and the
// tuner plugin when one is given (its Init may replace the model; see plugin.Client.Planner).
// With a Release, the model is that release's (planner.Config.Release): its default constants,
// with the node table's [constants] applied over them.
func (s *Setup) Planner(ctx context.Context, tuner *plugin.Client) (*planner.Planner, error) {
	var cfg planner.Config
	if s.Node != nil {
		var err error
		if cfg, err = node.PlannerConfig(s.Node, &s.Topo); err != nil {
			return nil, err
		}
	}
	cfg.Release = s.Release
	if !s.Release.IsZero() && s.Node != nil && s.Node.Constants != nil {
		k := s.Release.Constants()
		if err := k.Apply(s.Node.Constants); err != nil {
			return nil, fmt.Errorf("node: %s: %w", s.Node.File, err)
		}
		cfg.Constants = &k
	}
	if tuner != nil {
		return tuner.Planner(ctx, &s.Topo, cfg)
	}
	return planner.New(&s.Topo, cfg)
}

// usedEstimates keeps the estimated inputs this topology reads: node facts, constants, corrections
// and the one scale its node count selects.
func usedEstimates(all []string, scale string) []string {
	var out []string
	for _, p := range all {
		if !strings.HasPrefix(p, "scale.") || strings.HasPrefix(p, "scale."+scale+".") {
			out = append(out, p)
		}
	}
	return out
}

// Plural is "1 node" or "N nodes".
func Plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
