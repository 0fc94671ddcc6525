package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/internal/cmdline"
	"github.com/collplan/collplan/internal/outpath"
	"github.com/collplan/collplan/plugin/shimtable"
	"github.com/collplan/collplan/report"
)

// runCompile writes the decision table the NCCL tuner shim reads (docs/tuner-table.md).
func runCompile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compile", stderr)
	node := fs.String("node", "", "embedded node table, e.g. h100")
	table := fs.String("table", "", "node table file (TOML) instead of an embedded one")
	topology := fs.String("topology", "", "one topology file instead of a node table grid (one block)")
	nodes := fs.String("nodes", "", "node counts, comma-separated (default 1,2,4,...,1024)")
	rpn := fs.String("ranks-per-node", "", "ranks per node, comma-separated (default the table's GPUs per node, and 1)")
	pipeOps := fs.Int("pipe-ops", 4, "compile numPipeOps 1..N")
	ranked := fs.Int("ranked", 4, "ranked plans kept per interval (1..8), the fallbacks when NCCL ignores a cell")
	consts := fs.Bool("constants", false, "include the model constants for the v5/v6 init")
	noOverlay := fs.Bool("no-overlay", false, "with --node or --table: compile the node table alone, without its fitted overlay NAME.fit.toml")
	fabric := fs.String("fabric", "", "with --node or --table: fabric table (an embedded name or a FILE.toml) giving the inter-node inputs above 1 node")
	nccl := fs.String("nccl", "", "price the table with this NCCL release's model ("+costmodel.SupportedReleases+"; default 2.30.7), recorded in the file")
	rulesFile := fs.String("rules", "", "per-communicator rules file (TOML, docs/tuner-rules.md) baked into the table")
	out := fs.String("o", "", "output file (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("-o FILE is required")
	}
	if err := outpath.File("-o", *out); err != nil {
		return usageError{err}
	}
	req := shimtable.Request{MaxPipeOps: *pipeOps, K: *ranked, Constants: *consts}
	var err error
	if req.Release, err = parseRelease("--nccl", *nccl); err != nil {
		return err
	}
	if *rulesFile != "" {
		if req.Rules, err = shimtable.LoadRules(*rulesFile); err != nil {
			return usageError{err}
		}
	}
	if req.Nodes, err = intList("--nodes", *nodes); err != nil {
		return err
	}
	if req.RanksPerNode, err = intList("--ranks-per-node", *rpn); err != nil {
		return err
	}
	switch {
	case *topology != "" && *node == "" && *table == "":
		if *nodes != "" || *rpn != "" || *noOverlay || *fabric != "" {
			return usagef("--nodes, --ranks-per-node, --no-overlay and --fabric apply to a node table, not --topology")
		}
		tp, err := capabilities.LoadTopology(*topology)
		if err != nil {
			return usageError{err}
		}
		tp.Env.Overlay(capabilities.EnvFromProcess(os.LookupEnv))
		req.Topology = &tp
	case *topology == "" && (*node == "") != (*table == ""):
		if req.Node, err = report.LoadNode(*node, *table, *noOverlay); err != nil {
			return usageError{err}
		}
		if req.Node, _, err = withFabric(req.Node, *fabric); err != nil {
			return err
		}
	default:
		return usagef("give exactly one of --node, --table or --topology")
	}
	t, err := shimtable.Compile(ctx, req)
	if err != nil {
		return usageError{err}
	}
	data, err := t.Encode()
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		return fmt.Errorf("compile: %w", err)
	}
	for _, b := range t.Overlays {
		if note := b.Overlay.Note(); note != "" {
			fmt.Fprintf(stderr, "planner: compile: %d nodes x %d ranks: overlay %s: %s\n", b.NNodes, b.NRanks, b.Overlay.File, note)
		}
	}
	fmt.Fprintf(stdout, "wrote %s: %s, %d blocks, %d bytes, checksum %016x\n", *out, t.Name, len(t.Blocks), len(data), shimtable.Checksum(data))
	if req.Node != nil && req.Node.Overlay != "" {
		embedded := ""
		if *node != "" {
			embedded = " (embedded)"
		}
		fmt.Fprintf(stdout, "overlay: %s%s\n", req.Node.Overlay, embedded)
	}
	if req.Node != nil && req.Node.Fabric != nil {
		fmt.Fprintf(stdout, "fabric: %s (blocks above 1 node)\n", req.Node.Fabric.File)
	}
	if !t.Release.IsZero() {
		fmt.Fprintf(stdout, "nccl: %s (the model of that release; recorded in the table)\n", t.Release)
	}
	for i := range req.Rules {
		fmt.Fprintf(stdout, "rule %d: %s: %d classes\n", i+1, req.Rules[i].Describe(), t.Applied[i])
	}
	named := map[int]string{}
	for _, n := range t.Named {
		named[n.Block] = n.Comm
	}
	for i, b := range t.Blocks {
		fmt.Fprintf(stdout, "  %4d nodes %6d ranks  pipe ops %d..%d", b.NNodes, b.NRanks, b.MinPipeOps, b.MaxPipeOps)
		if c, ok := named[i]; ok {
			fmt.Fprintf(stdout, "  communicators named %q", c)
		}
		fmt.Fprintln(stdout)
	}
	return nil
}

// intList reads flag name's comma-separated positive integers.
func intList(name, s string) ([]int, error) {
	v, err := cmdline.PositiveInts(s)
	if err != nil {
		return nil, usagef("%s: %v", name, err)
	}
	return v, nil
}
