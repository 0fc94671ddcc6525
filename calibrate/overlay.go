package calibrate

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/collplan/collplan/internal/configfile"
	"github.com/collplan/collplan/tables"
)

// OverlayInput says where a fit came from, for the overlay's [provenance].
type OverlayInput struct {
	Nodes int // node count the cells were fitted at
	// RanksPerNode is the ranks per node they were fitted at, written as each cell's
	// ranks_per_node: the planner applies a cell only at its own shape.
	RanksPerNode int
	Files        []tables.InputFile
	NCCLVersions []string
	Date         string // YYYY-MM-DD
	// Keep are cells of an earlier overlay to keep (other shapes); cells at Nodes x RanksPerNode
	// are replaced.
	Keep []tables.FitCell
	// KeepFiles are the earlier overlay's provenance files to keep with them (KeepProvenance),
	// written before Files, which are tagged with Nodes x RanksPerNode.
	KeepFiles []tables.InputFile
	// Corrections, when not empty, are written as the overlay's [[corrections.cell]]: the complete
	// list (an overlay's array replaces the table's), e.g. from TableCorrections. A row with nodes
	// and ranks_per_node applies at that shape only (a fit's own rows, fitted against its cells);
	// the table's rows have none and apply at every shape.
	Corrections []tables.CorrectionCell
	// NodesTags tag the node count of the cells at a node count ("predicted from ..."); a count
	// not listed is tagged measured.
	NodesTags map[int]string
	// Others are fits at other node counts than Nodes (a fit across node counts priced at each),
	// written beside the main one with their own tags.
	Others map[int]*FitResult
	// Credit is the fit's PointOptions.Credit; CreditModel is said in the overlay's header.
	Credit string
}

func sortedNodes(m map[int]*FitResult) []int {
	out := make([]int, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

// KeepFromOverlay reads the [[fit.cell]] entries of an existing overlay's text, for OverlayInput.Keep:
// those of another shape than nodes x rpn (a cell without ranks_per_node was fitted at tableGPN,
// the table's gpus_per_node, and is kept with that value written out).
// The overlay must be of the schema version this build writes (tables.OverlayVersion), or have none
// (written before overlays had versions, with the same keys), which the rewrite migrates.
func KeepFromOverlay(file string, data []byte, nodes, rpn, tableGPN int) ([]tables.FitCell, error) {
	var o struct {
		Fit *tables.Fit `toml:"fit"`
	}
	if _, err := configfile.DecodeTOML(file, data, tables.MaxDepth, &o); err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	if err := checkUpdatable(file, data); err != nil {
		return nil, err
	}
	var out []tables.FitCell
	if o.Fit != nil {
		for _, c := range o.Fit.Cell {
			if c.RanksPerNode == 0 {
				c.RanksPerNode = tableGPN
			}
			if c.Nodes != nodes || c.RanksPerNode != rpn {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// tableNames are the node tables' spellings of collectives, algorithms and protocols.
var (
	tableColl  = []string{"broadcast", "reduce", "allgather", "reducescatter", "allreduce"}
	tableAlgo  = []string{"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"}
	tableProto = []string{"ll", "ll128", "simple"}
)

// FitCells turns a fit into node-table [[fit.cell]] entries at nodes x rpn.
func (r *FitResult) FitCells(nodes, rpn int) []tables.FitCell {
	points := map[Cell]int{}
	for _, res := range r.Residuals {
		points[res.Cell]++
	}
	sig := map[Cell][2]float64{}
	for _, p := range r.Params {
		s := sig[p.Cell]
		if p.Kind == "lat_us" {
			s[0] = p.Sigma
		} else {
			s[1] = p.Sigma
		}
		sig[p.Cell] = s
	}
	var out []tables.FitCell
	for _, c := range r.cellsSorted() {
		v := r.Fitted[c]
		out = append(out, tables.FitCell{Coll: tableColl[c.Coll], Algo: tableAlgo[c.Algo], Proto: tableProto[c.Proto],
			Nodes: nodes, RanksPerNode: rpn, LatUS: v[0], BWGBps: v[1], LatSigma: sig[c][0], BWSigma: sig[c][1], Points: max(1, points[c])})
	}
	return out
}

// WriteOverlay writes NAME.fit.toml: its schema_version (tables.OverlaySchema), the fitted cells as
// [[fit.cell]] (every number tagged "measured", but a latency or bandwidth the data did not
// identify, which keeps the prior's value and is tagged heldTag, and one that only envelope points
// constrain, which is applied and tagged inferredTag, as are their sigmas and, for an inferred
// cell, its point count) and the fit's [provenance].
func WriteOverlay(w io.Writer, r *FitResult, in OverlayInput) error {
	held := r.valueSources(in.Nodes, in.RanksPerNode)
	cells := append(append([]tables.FitCell(nil), in.Keep...), r.FitCells(in.Nodes, in.RanksPerNode)...)
	for _, n := range sortedNodes(in.Others) {
		o := in.Others[n]
		cells = append(cells, o.FitCells(n, in.RanksPerNode)...)
		for k, v := range o.valueSources(n, in.RanksPerNode) {
			held[k] = v
		}
	}
	sort.SliceStable(cells, func(i, j int) bool {
		if cells[i].Nodes != cells[j].Nodes {
			return cells[i].Nodes < cells[j].Nodes
		}
		return cells[i].RanksPerNode < cells[j].RanksPerNode
	})
	var b strings.Builder
	fmt.Fprintf(&b, "schema_version = %d\n\n", tables.OverlaySchema)
	b.WriteString("# Written by calibrate: fitted latency and bandwidth per cell, applied over the node table\n")
	b.WriteString("# for the shape each was fitted at (nodes x ranks_per_node). Cells not listed keep the model's values.\n")
	if in.Credit == CreditModel {
		b.WriteString("# The points of free and partly pinned sweeps were credited to the cell NCCL's model picks\n")
		b.WriteString("# there (calibrate --credit model): those cells are measured through that credit.\n")
	}
	num := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	for _, c := range cells {
		fmt.Fprintf(&b, "\n[[fit.cell]]\ncoll = %q\nalgo = %q\nproto = %q\n", c.Coll, c.Algo, c.Proto)
		tag := in.NodesTags[c.Nodes]
		if tag == "" {
			tag = "measured"
		}
		fmt.Fprintf(&b, "nodes = %d  # %s\n", c.Nodes, tag)
		if c.RanksPerNode > 0 {
			fmt.Fprintf(&b, "ranks_per_node = %d  # measured\n", c.RanksPerNode)
		}
		h := held[heldKey{c.Coll, c.Algo, c.Proto, c.Nodes, c.RanksPerNode}]
		fmt.Fprintf(&b, "lat_us = %s  # %s\n", num(c.LatUS), valueTag(h[0]))
		fmt.Fprintf(&b, "bw_gbps = %s  # %s\n", num(c.BWGBps), valueTag(h[1]))
		fmt.Fprintf(&b, "lat_sigma = %s  # %s\n", num(c.LatSigma), valueTag(h[0]))
		fmt.Fprintf(&b, "bw_sigma = %s  # %s\n", num(c.BWSigma), valueTag(h[1]))
		pt := srcMeasured
		if h[0] == srcInferred || h[1] == srcInferred {
			pt = srcInferred
		}
		fmt.Fprintf(&b, "points = %d  # %s\n", c.Points, valueTag(pt))
	}
	if len(in.Corrections) > 0 {
		b.WriteString("\n# Bandwidth correction factors per log2 size bucket (bucket i: [64*2^i, 64*2^(i+1)) bytes),\n")
		b.WriteString("# the table's own (or NCCL's treeCorrectionFactor) times what calibrate fitted at the row's shape\n")
		b.WriteString("# (nodes x ranks_per_node, over that shape's fitted cells); a row without a shape is the table's own.\n")
	}
	for _, c := range in.Corrections {
		fs := make([]string, len(c.Factors))
		for i, f := range c.Factors {
			fs[i] = tomlFloat(f)
		}
		fmt.Fprintf(&b, "\n[[corrections.cell]]\ncoll = %q\nalgo = %q\nproto = %q\n", c.Coll, c.Algo, c.Proto)
		if c.Nodes != 0 {
			fmt.Fprintf(&b, "nodes = %d  # measured\nranks_per_node = %d  # measured\n", c.Nodes, c.RanksPerNode)
		}
		fmt.Fprintf(&b, "factors = [%s]  # measured\n", strings.Join(fs, ", "))
	}
	b.WriteString("\n[provenance]\n")
	fmt.Fprintf(&b, "date = %q\n", in.Date)
	vs := make([]string, len(in.NCCLVersions))
	for i, v := range in.NCCLVersions {
		vs[i] = strconv.Quote(v)
	}
	fmt.Fprintf(&b, "nccl_versions = [%s]\n", strings.Join(vs, ", "))
	for _, f := range provenanceFiles(in) {
		fmt.Fprintf(&b, "\n[[provenance.fitted_from]]\nfile = %q\nsha256 = %q\n", f.File, f.SHA256)
		if f.Nodes != 0 {
			fmt.Fprintf(&b, "nodes = %d  # measured\nranks_per_node = %d  # measured\n", f.Nodes, f.RanksPerNode)
		}
	}
	b.WriteString("\n[provenance.residual]\n")
	fmt.Fprintf(&b, "points = %d  # measured\n", len(r.Residuals))
	fmt.Fprintf(&b, "median_rel = %s  # measured\n", num(r.MedianRel))
	fmt.Fprintf(&b, "max_rel = %s  # measured\n", num(r.MaxRel))
	_, err := io.WriteString(w, b.String())
	return err
}

// provenanceFiles are the overlay's provenance files: the kept ones, then the fit's own tagged
// with its shape (a kept file the fit read again is named once, with the fit's shape).
func provenanceFiles(in OverlayInput) []tables.InputFile {
	type key struct{ file, sum string }
	own := map[key]bool{}
	var fit []tables.InputFile
	for _, f := range in.Files {
		if in.Nodes > 0 && in.RanksPerNode > 0 && f.Nodes == 0 {
			f.Nodes, f.RanksPerNode = in.Nodes, in.RanksPerNode
		}
		own[key{f.File, f.SHA256}] = true
		fit = append(fit, f)
	}
	var out []tables.InputFile
	for _, f := range in.KeepFiles {
		if !own[key{f.File, f.SHA256}] {
			out = append(out, f)
		}
	}
	return append(out, fit...)
}

// KeepProvenance reads an earlier overlay's provenance files for a refit at nodes x rpn that keeps
// its cells of other shapes: the files of other shapes. A file without a shape (written before
// calibrate tagged them) is kept when keep is set, that is when some earlier cell survives the
// refit, since it may be that cell's.
func KeepProvenance(file string, data []byte, nodes, rpn int, keep bool) ([]tables.InputFile, error) {
	var o struct {
		Provenance *tables.Provenance `toml:"provenance"`
	}
	if _, err := configfile.DecodeTOML(file, data, tables.MaxDepth, &o); err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	if o.Provenance == nil {
		return nil, nil
	}
	var out []tables.InputFile
	for _, f := range o.Provenance.FittedFrom {
		if f.Nodes == 0 && keep || f.Nodes != 0 && (f.Nodes != nodes || f.RanksPerNode != rpn) {
			out = append(out, f)
		}
	}
	return out, nil
}

// OverlayCorrections reads an existing overlay's [corrections] for a refit at nodes x rpn: whether
// it has any (its cells are then the table's effective ones and must be written again), and the
// rows of other shapes, which the refit keeps as it keeps their cells (KeepFromOverlay). Rows of
// this shape, and rows without one (an earlier overlay's, or the table's copied in), are not kept:
// the refit writes the table's own rows and its fitted ones.
func OverlayCorrections(file string, data []byte, nodes, rpn int) (had bool, keep []tables.CorrectionCell, err error) {
	var o struct {
		Corrections *tables.Corrections `toml:"corrections"`
	}
	if _, err := configfile.DecodeTOML(file, data, tables.MaxDepth, &o); err != nil {
		return false, nil, fmt.Errorf("calibrate: %w", err)
	}
	if err := checkUpdatable(file, data); err != nil {
		return false, nil, err
	}
	if o.Corrections == nil {
		return false, nil, nil
	}
	for _, c := range o.Corrections.Cell {
		if c.Nodes != 0 && !c.At(nodes, rpn) {
			keep = append(keep, c)
		}
	}
	return len(o.Corrections.Cell) > 0, keep, nil
}

// checkUpdatable accepts an overlay to rewrite: of this build's schema version, or of none (the same
// keys, written before overlays had versions).
func checkUpdatable(file string, data []byte) error {
	if _, err := tables.OverlayVersion(file, data); err != nil && !errors.Is(err, tables.ErrNoSchemaVersion) {
		return fmt.Errorf("calibrate: the overlay to update: %w", err)
	}
	return nil
}
