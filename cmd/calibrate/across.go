package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/internal/cmdline"
	"github.com/collplan/collplan/internal/configfile"
	"github.com/collplan/collplan/tables"
)

// acrossJob is a fit across node counts: what run parsed for it.
type acrossJob struct {
	n, pn        *tables.Node
	prior        calibrate.Prior
	sweeps       []*calibrate.Sweep
	rpn          int    // ranks per node of every node count
	gpnFlag      int    // --gpus-per-node (0: none)
	rpnFrom      string // where rpn comes from, for shape errors
	half, credit string
	out, date    string
	holdout      int   // node count left out of the fit (0: none)
	predict      []int // extra node counts to write cells for
	asJSON       bool
	checkOutputs func() error
}

// acrossShape is one node count of the job: its topology, prior configuration and points.
type acrossShape struct {
	calibrate.AtNodes
	held bool
}

// AcrossReport is what calibrate prints after a fit across node counts.
type AcrossReport struct {
	Prior     calibrate.Prior         `json:"prior"`
	Half      string                  `json:"half"`
	Fitted    []int                   `json:"fitted_nodes"`
	HeldOut   int                     `json:"held_out_nodes,omitempty"`
	Points    int                     `json:"points"`
	Params    []calibrate.AcrossParam `json:"params"`
	Errors    []AcrossNodeError       `json:"prediction_error"`
	Written   []int                   `json:"overlay_nodes"`
	Overlay   string                  `json:"overlay"`
	MedianRel float64                 `json:"median_rel"`
}

// AcrossNodeError is the median |pred/meas - 1| at one node count, of the fit and of the prior.
type AcrossNodeError struct {
	Nodes  int     `json:"nodes"`
	Points int     `json:"points"`
	Fitted float64 `json:"fitted"`
	Prior  float64 `json:"prior"`
	Role   string  `json:"role"` // "fitted" or "held out"
}

// sweepNodeCounts lists, ascending, the node counts the sweeps name.
func sweepNodeCounts(sw []*calibrate.Sweep) []int {
	seen := map[int]bool{}
	var out []int
	for _, s := range sw {
		if s.Nodes != 0 && !seen[s.Nodes] {
			seen[s.Nodes] = true
			out = append(out, s.Nodes)
		}
	}
	sort.Ints(out)
	return out
}

// parseNodeList reads --predict-nodes: comma-separated node counts, each at least 1.
func parseNodeList(s string) ([]int, error) {
	v, err := cmdline.PositiveInts(s)
	if err != nil {
		return nil, usagef("--predict-nodes %q: %v (want node counts, comma-separated)", s, err)
	}
	return v, nil
}

// runAcross fits sweeps measured at several node counts together (calibrate.FitAcross), reports the
// prediction error at every node count (and at --holdout-nodes, left out of the fit), and writes
// the overlay's cells at every node count fitted, held out or named by --predict-nodes.
func runAcross(ctx context.Context, j acrossJob, stdout, stderr io.Writer) error {
	counts := sweepNodeCounts(j.sweeps)
	for _, s := range j.sweeps {
		if s.Nodes == 0 {
			return usagef("%s:%d: the sweeps ran on %s nodes, and this one names no node count: give it one in the manifest (nodes = N)", s.File, s.Line, joinInts(counts))
		}
	}
	if j.holdout != 0 && !containsInt(counts, j.holdout) {
		return usagef("--holdout-nodes %d: no sweep ran on %d nodes (they ran on %s)", j.holdout, j.holdout, joinInts(counts))
	}
	if j.holdout != 0 && len(counts) < 2 {
		return usagef("--holdout-nodes %d: the sweeps ran on %d nodes only; nothing would be left to fit", j.holdout, j.holdout)
	}
	var shapes []acrossShape
	for _, c := range counts {
		var sw []*calibrate.Sweep
		for _, s := range j.sweeps {
			if s.Nodes == c {
				sw = append(sw, s)
			}
		}
		for _, s := range sw {
			if !s.CollKnown {
				continue // not fitted: Points says why
			}
			if _, err := calibrate.CheckShape(s, j.gpnFlag, calibrate.Shape{Nodes: c, RanksPerNode: j.rpn}, j.rpnFrom, nil); err != nil {
				return usageError{err}
			}
		}
		topo, cfg, _, err := priorPlanner(j.pn, c, j.rpn, nil)
		if err != nil {
			return err
		}
		pts, skipped, err := calibrate.Points(ctx, sw, &topo, cfg, calibrate.PointOptions{Half: j.half, Credit: j.credit})
		if err != nil {
			return err
		}
		for _, p := range skipped {
			fmt.Fprintln(stderr, "calibrate: warning:", p.Error())
		}
		if len(pts) == 0 {
			fmt.Fprintf(stderr, "calibrate: warning: no valid measured point at %d nodes\n", c)
			continue
		}
		shapes = append(shapes, acrossShape{AtNodes: calibrate.AtNodes{Nodes: c, Topo: &topo, Cfg: cfg, Points: pts}, held: c == j.holdout})
	}
	var fitShapes []calibrate.AtNodes
	for _, s := range shapes {
		if !s.held {
			fitShapes = append(fitShapes, s.AtNodes)
		}
	}
	if len(fitShapes) == 0 {
		return usagef("no valid measured point to fit at %s nodes", joinInts(counts))
	}
	if err := j.checkOutputs(); err != nil {
		return err
	}
	fit, err := calibrate.FitAcross(ctx, fitShapes, calibrate.FitOptions{})
	if err != nil {
		return err
	}
	rep := &AcrossReport{Prior: j.prior, Half: j.half, Fitted: fit.Nodes, HeldOut: j.holdout, Points: fit.Points,
		Params: fit.Params, Overlay: j.out, MedianRel: fit.MedianRel}
	for _, s := range shapes {
		fe, pe, np, err := fit.PredictionError(ctx, s.AtNodes)
		if err != nil {
			return err
		}
		role := "fitted"
		if s.held {
			role = "held out"
		}
		rep.Errors = append(rep.Errors, AcrossNodeError{Nodes: s.Nodes, Points: np, Fitted: fe, Prior: pe, Role: role})
	}

	// The overlay: cells at every node count fitted, held out or asked for.
	write := map[int]bool{}
	for _, c := range fit.Nodes {
		write[c] = true
	}
	if j.holdout != 0 {
		write[j.holdout] = true
	}
	for _, c := range j.predict {
		write[c] = true
	}
	tags := map[int]string{}
	for c := range write {
		if !containsInt(fit.Nodes, c) {
			tags[c] = "predicted by the fit across " + joinInts(fit.Nodes) + " nodes"
		} else {
			tags[c] = "measured (fitted across " + joinInts(fit.Nodes) + " nodes)"
		}
		rep.Written = append(rep.Written, c)
	}
	sort.Ints(rep.Written)
	in := calibrate.OverlayInput{RanksPerNode: j.rpn, Date: j.date, NodesTags: tags, Credit: j.credit}
	if in.Files, in.NCCLVersions, err = provenance(j.sweeps, pointsOf(fitShapes)); err != nil {
		return err
	}
	var old []byte
	if data, err := configfile.Read(j.out); err == nil {
		old = data
	} else if !os.IsNotExist(err) {
		return usagef("the overlay to update: %v", err)
	}
	var last *calibrate.FitResult
	for i, c := range rep.Written {
		topo, cfg, prior, err := priorPlanner(j.pn, c, j.rpn, nil)
		if err != nil {
			return err
		}
		res, err := fit.At(ctx, &topo, cfg)
		if err != nil {
			return err
		}
		cfg.Cells = res.Overrides()
		_, heldBack, err := fittedPlanner(ctx, &topo, cfg, prior, stderr)
		if err != nil {
			return err
		}
		res = withoutCells(res, heldBack)
		if i == len(rep.Written)-1 {
			last, in.Nodes = res, c
			break
		}
		if in.Others == nil {
			in.Others = map[int]*calibrate.FitResult{}
		}
		in.Others[c] = res
	}
	if old != nil { // cells of the old overlay at node counts this fit does not write are kept
		kept, err := calibrate.KeepFromOverlay(j.out, old, 0, 0, j.n.Node.GPUsPerNode) // every cell
		if err != nil {
			return usageError{err}
		}
		for _, k := range kept {
			if !write[k.Nodes] || k.RanksPerNode != j.rpn {
				in.Keep = append(in.Keep, k)
			}
		}
	}
	var buf bytes.Buffer
	if err := calibrate.WriteOverlay(&buf, last, in); err != nil {
		return err
	}
	if _, err := tables.ApplyOverlay(j.n, j.out, buf.Bytes()); err != nil {
		return fmt.Errorf("the fitted overlay does not load: %w", err)
	}
	if err := os.WriteFile(j.out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "calibrate: wrote %s (cells at %s nodes, fitted across %s nodes from %d points)\n",
		j.out, joinInts(rep.Written), joinInts(fit.Nodes), fit.Points)
	if j.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteText(stdout)
}

// WriteText prints the report: the multipliers per cell, then the prediction error per node count.
func (r *AcrossReport) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "prior: %s\n", r.Prior)
	fmt.Fprintf(tw, "fit across %s nodes (%d points, %s half)", joinInts(r.Fitted), r.Points, r.Half)
	if r.HeldOut != 0 {
		fmt.Fprintf(tw, "; %d nodes held out", r.HeldOut)
	}
	fmt.Fprintf(tw, "\n\nmultipliers of the prior's parts (- : not identified, held at the prior)\ncell")
	kinds := []string{calibrate.KindBaseLat, calibrate.KindIntraLat, calibrate.KindInterLat, calibrate.KindBW1, calibrate.KindBW2, calibrate.KindBWMulti}
	for _, k := range kinds {
		fmt.Fprintf(tw, "\t%s", k)
	}
	fmt.Fprintln(tw)
	for i := 0; i < len(r.Params); i += len(kinds) {
		fmt.Fprintf(tw, "%s", r.Params[i].Cell)
		for _, p := range r.Params[i : i+len(kinds)] {
			if p.Identified {
				fmt.Fprintf(tw, "\t%.3f±%.3f", p.Mult, p.Sigma)
			} else {
				fmt.Fprintf(tw, "\t-")
			}
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "\nprediction error (median |pred/meas - 1|)\nnodes\tpoints\tfitted\tprior\t\n")
	for _, e := range r.Errors {
		fmt.Fprintf(tw, "%d\t%d\t%.1f%%\t%.1f%%\t%s\n", e.Nodes, e.Points, 100*e.Fitted, 100*e.Prior, e.Role)
	}
	fmt.Fprintf(tw, "\noverlay %s: cells at %s nodes\n", r.Overlay, joinInts(r.Written))
	return tw.Flush()
}

func pointsOf(shapes []calibrate.AtNodes) []calibrate.Point {
	var out []calibrate.Point
	for _, s := range shapes {
		out = append(out, s.Points...)
	}
	return out
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}
