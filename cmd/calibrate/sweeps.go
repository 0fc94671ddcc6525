package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/internal/linescan"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

// sweepSpec is one collbench run: a collective, pinned to one (algo, proto) cell or free.
type sweepSpec struct {
	coll        costmodel.Coll
	algo, proto string // collbench's --algo/--proto ("" free)
	file        string // base name in the sweeps directory
}

// sweepConfig is what every collbench run of one calibrate --run shares.
type sweepConfig struct {
	collbench        string
	np, rpn          int // ranks; ranks per (virtual) node, 0 for one node
	nodes, gpn       int
	transport        string // collbench --transport, or "net": collbench --hosts nodes
	minB, maxB, fact int64
	iters, warmup    int
	// repeat runs each pinned sweep this many times and keeps, per size, the fastest row (< 2: once)
	// by the time of half, the half the fit uses.
	repeat int
	half   string
}

// The dtype and op of every collbench sweep calibrate runs (collbench's defaults, -d float -o sum):
// the class the fit's menus price (calibrate.Menus) and the one each pin's legality is asked for.
const (
	sweepDtype = kernels.Float32
	sweepOp    = kernels.Sum
)

// engineRuns reports whether collplan's engine runs a call of coll pinned to (a, p) on np ranks,
// rpn per virtual node, with the sweeps' dtype and op: engine.PinError is nil. It is the engine's
// own legality check, so a path the engine gains (CollNet while it answers ErrNotImplemented)
// joins the sweeps by itself.
func engineRuns(c costmodel.Coll, a costmodel.Algo, p costmodel.Proto, np, rpn int) bool {
	return engine.PinError(c, a, p, np, rpn, sweepDtype, sweepOp) == nil
}

var (
	benchProto = map[costmodel.Proto]string{costmodel.LL: "LL", costmodel.LL128: "LL128", costmodel.Simple: "Simple"}
	benchColl  = map[costmodel.Coll]string{costmodel.AllReduce: "allreduce", costmodel.AllGather: "allgather",
		costmodel.ReduceScatter: "reducescatter", costmodel.Broadcast: "broadcast", costmodel.Reduce: "reduce"}
)

// planSweeps lists, per collective, every cell that the prior's menu finds legal and the engine
// runs on np ranks of rpn per virtual node (engineRuns), pinned by collbench --algo with
// NCCL_ALGO's name (Ring, Tree, NVLS, NVLSTree, PAT, CollNetDirect, CollNetChain) and --proto, then
// the free choice (when free is set).
func planSweeps(menus map[costmodel.Coll]*planner.Menu, colls []costmodel.Coll, free bool, np, rpn int) []sweepSpec {
	var out []sweepSpec
	for _, c := range colls {
		m := menus[c]
		for a := costmodel.Algo(0); a < costmodel.NumAlgos; a++ {
			for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
				if m.Cells[a][p].Reason != "" || m.Cells[a][p].BWGBps <= 0 || !engineRuns(c, a, p, np, rpn) {
					continue
				}
				an, pn := a.EnvName(), benchProto[p]
				out = append(out, sweepSpec{coll: c, algo: an, proto: pn,
					file: fmt.Sprintf("%s-%s-%s.txt", benchColl[c], strings.ToLower(an), strings.ToLower(pn))})
			}
		}
		if free {
			out = append(out, sweepSpec{coll: c, file: benchColl[c] + "-free.txt"})
		}
	}
	return out
}

// sizesOf counts the sizes collbench runs for -b lo -e hi -f f.
func sizesOf(lo, hi, f int64) int {
	n := 0
	for s := lo; s <= hi; s *= f {
		n++
		if s == 0 {
			break
		}
	}
	return n
}

// findCollbench returns the collbench to run: flag, beside this binary, then PATH.
func findCollbench(flagPath string) (string, error) {
	if flagPath != "" {
		if _, err := os.Stat(flagPath); err != nil {
			return "", usagef("--collbench: %v", err)
		}
		return flagPath, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "collbench")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("collbench"); err == nil {
		return p, nil
	}
	return "", usagef("collbench not found beside calibrate or on PATH; build it (go build ./cmd/collbench) or give --collbench PATH")
}

// progress is a one-line bar on a terminal; it draws nothing when w is nil.
type progress struct {
	w            io.Writer
	done, total  int
	label, shown string
}

func (p *progress) draw() {
	if p.w == nil {
		return
	}
	const width = 30
	fill := 0
	if p.total > 0 {
		fill = width * p.done / p.total
	}
	s := fmt.Sprintf("\r[%s%s] %d/%d %s", strings.Repeat("#", fill), strings.Repeat(" ", width-fill), p.done, p.total, p.label)
	if pad := len(p.shown) - len(s); pad > 0 {
		s += strings.Repeat(" ", pad)
	}
	p.shown = s
	fmt.Fprint(p.w, s)
}

func (p *progress) finish() {
	if p.w != nil && p.shown != "" {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", len(p.shown)))
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// runSweeps runs collbench once per spec, writing each table to dir/spec.file and a sweeps.toml
// manifest beside them.
func runSweeps(ctx context.Context, cfg sweepConfig, specs []sweepSpec, dir string, bar io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	perSweep := sizesOf(cfg.minB, cfg.maxB, cfg.fact)
	runsOf := func(sp sweepSpec) int {
		if sp.algo != "" && cfg.repeat > 1 {
			return cfg.repeat
		}
		return 1
	}
	total := 0
	for _, sp := range specs {
		total += perSweep * runsOf(sp)
	}
	pg := &progress{w: bar, total: total}
	doneRows := 0
	defer pg.finish()
	var man strings.Builder
	man.WriteString("# Written by calibrate --run: one collbench sweep per legal pinned cell, and the free choice.\n")
	// Every pinned sweep runs cfg.repeat times, in rounds: round r runs each sweep's r-th run,
	// so the runs of one cell are spread over the whole calibration rather than back to back.
	// A shared host's slow spells (seconds long, 2x at one size here) then reach all runs of a
	// cell only when they reach every round, and the per-size minimum compares cells measured
	// across the same spells. The free choice runs once, in the first round: NCCL's pick may
	// differ between runs, so its minimum would mix cells.
	argsOf := make([][]string, len(specs))
	runs := make([][][]byte, len(specs))
	rounds := 0
	for i, sp := range specs {
		argsOf[i] = sweepArgs(cfg, sp)
		rounds = max(rounds, runsOf(sp))
	}
	for rep := 0; rep < rounds; rep++ {
		for i, sp := range specs {
			k := runsOf(sp)
			if rep >= k {
				continue
			}
			pg.label = benchColl[sp.coll] + " " + sp.pin()
			if k > 1 {
				pg.label += fmt.Sprintf(" (run %d/%d)", rep+1, k)
			}
			pg.done = doneRows
			pg.draw()
			out, err := runCollbench(ctx, cfg, argsOf[i], pg)
			if err != nil {
				return err
			}
			doneRows += perSweep
			runs[i] = append(runs[i], out)
		}
	}
	for i, sp := range specs {
		data := runs[i][0]
		note := "collbench " + strings.Join(argsOf[i], " ")
		if k := len(runs[i]); k > 1 {
			var err error
			if data, err = minOfRuns(sp.file, runs[i], cfg.half); err != nil {
				return err
			}
			note += fmt.Sprintf("; run %d times in rounds over every sweep, each row the fastest of the %d (minimum time per size)", k, k)
		}
		path := filepath.Join(dir, sp.file)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&man, "\n[[sweep]]\nfile = %q\n", sp.file)
		if sp.algo != "" {
			fmt.Fprintf(&man, "algo = %q\nproto = %q\n", sp.algo, sp.proto)
		}
		fmt.Fprintf(&man, "coll = %q\nnodes = %d\ngpus_per_node = %d\nnote = %q\n", benchColl[sp.coll], cfg.nodes, cfg.gpn, note)
	}
	pg.done = pg.total
	pg.draw()
	if len(specs) == 0 {
		return errors.New("no sweep to run")
	}
	return os.WriteFile(filepath.Join(dir, "sweeps.toml"), []byte(man.String()), 0o644)
}

// sweepArgs is collbench's command line for one sweep.
func sweepArgs(cfg sweepConfig, sp sweepSpec) []string {
	args := []string{benchColl[sp.coll], "-np", strconv.Itoa(cfg.np), "-b", strconv.FormatInt(cfg.minB, 10),
		"-e", strconv.FormatInt(cfg.maxB, 10), "-f", strconv.FormatInt(cfg.fact, 10),
		"-n", strconv.Itoa(cfg.iters), "-w", strconv.Itoa(cfg.warmup)}
	if cfg.transport == "net" {
		// every node an emulated host: its ranks goroutines of one process, TCP between hosts
		args = append(args, "--hosts", strconv.Itoa(cfg.nodes))
	} else {
		args = append(args, "--transport", cfg.transport)
	}
	if cfg.rpn > 0 {
		args = append(args, "--ranks-per-node", strconv.Itoa(cfg.rpn))
	}
	if sp.algo != "" {
		args = append(args, "--algo", sp.algo, "--proto", sp.proto)
	}
	return args
}

// pin names the sweep's cell, "Ring/LL", or "free".
func (sp sweepSpec) pin() string {
	if sp.algo == "" {
		return "free"
	}
	return sp.algo + "/" + sp.proto
}

// runCollbench runs collbench once and returns its standard output, advancing pg per table row.
func runCollbench(ctx context.Context, cfg sweepConfig, args []string, pg *progress) ([]byte, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, cfg.collbench, args...)
	cmd.Stderr = &errb
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	scanDone := make(chan struct{})
	var scanErr error // a line over linescan.MaxBytes: the output would be cut short
	go func() {
		defer close(scanDone)
		sc := linescan.New(cfg.collbench+" stdout", pr)
		for sc.Scan() {
			l := sc.Text()
			out.WriteString(l)
			out.WriteByte('\n')
			if t := strings.TrimSpace(l); t != "" && t[0] >= '0' && t[0] <= '9' {
				pg.done++
				pg.draw()
			}
		}
		scanErr = sc.Err()
		io.Copy(io.Discard, pr) // let collbench finish
	}()
	err := cmd.Run()
	pw.Close()
	<-scanDone
	if err == nil && scanErr != nil {
		return nil, fmt.Errorf("%s %s: %w", cfg.collbench, strings.Join(args, " "), scanErr)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		msg := strings.TrimSpace(errb.String())
		if len(msg) > 2000 {
			msg = "..." + msg[len(msg)-2000:]
		}
		return nil, fmt.Errorf("%s %s: %w: %s", cfg.collbench, strings.Join(args, " "), err, msg)
	}
	return out.Bytes(), nil
}

// minOfRuns merges repeated runs of one sweep: the first run's text, with each table row replaced
// by the row of the run whose time at that size is the least (in the half the fit uses,
// calibrate.HalfInPlace or HalfOutOfPlace; the other half when that one is not valid), so that a
// spike in one run does not reach the fit. A comment line in the preamble says so.
func minOfRuns(file string, runs [][]byte, half string) ([]byte, error) {
	type best struct {
		t    float64
		text string
	}
	bySize := map[int64]best{}
	for i, r := range runs {
		sw, err := calibrate.ParseSweep(fmt.Sprintf("%s (run %d)", file, i+1), bytes.NewReader(r))
		if err != nil {
			return nil, err
		}
		lines := strings.Split(string(r), "\n")
		for _, row := range sw.Rows {
			h, other := row.IP, row.OOP
			if half == calibrate.HalfOutOfPlace {
				h, other = other, h
			}
			if !h.Valid {
				h = other
			}
			if !h.Valid || row.Line < 1 || row.Line > len(lines) {
				continue
			}
			if b, ok := bySize[row.Bytes]; !ok || h.TimeUS < b.t {
				bySize[row.Bytes] = best{h.TimeUS, lines[row.Line-1]}
			}
		}
	}
	first, err := calibrate.ParseSweep(file, bytes.NewReader(runs[0]))
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(runs[0]), "\n")
	for _, row := range first.Rows {
		if b, ok := bySize[row.Bytes]; ok && row.Line >= 1 && row.Line <= len(lines) {
			lines[row.Line-1] = b.text
		}
	}
	note := fmt.Sprintf("# calibrate --repeat %d: each row below is the fastest of %d runs of this sweep (minimum time per size)", len(runs), len(runs))
	return []byte(note + "\n" + strings.Join(lines, "\n")), nil
}
