package cuda

import (
	"fmt"
	"io"
	"strconv"

	"github.com/collplan/collplan/costmodel"
)

// TableRow is one size of an nccl-tests table: the out-of-place and in-place times of one call in
// microseconds and their wrong-element counts (-1 prints N/A).
type TableRow struct {
	Bytes, Count      int64
	Type, Redop       string
	Root              int
	OOPUs, IPUs       float64
	OOPWrong, IPWrong int
}

// BusFactor = 2(n-1)/n for AllReduce, (n-1)/n for AllGather and ReduceScatter, 1 for Broadcast and
// Reduce: nccl-tests' busbw over algbw (its doc/PERFORMANCE.md).
func BusFactor(c costmodel.Coll, n int) float64 {
	switch c {
	case costmodel.AllReduce:
		return 2 * float64(n-1) / float64(n)
	case costmodel.AllGather, costmodel.ReduceScatter:
		return float64(n-1) / float64(n)
	}
	return 1
}

// Programs are nccl-tests' program names per collective.
var Programs = map[costmodel.Coll]string{
	costmodel.AllReduce: "all_reduce_perf", costmodel.AllGather: "all_gather_perf",
	costmodel.ReduceScatter: "reduce_scatter_perf", costmodel.Broadcast: "broadcast_perf", costmodel.Reduce: "reduce_perf",
}

// Table is what an nccl-tests table's preamble says of its run; Write prints the table.
type Table struct {
	Coll         costmodel.Coll
	Ranks        int
	Device, Note string // the device's name; what ran (algorithm, protocol, channels)
	Warmup       int
	Iters        int
	StepFactor   int64 // the sizes' factor when > 1, else StepBytes is their increment
	StepBytes    int64
}

// WriteTable writes rows as collbench and nccl-tests print them (the current 13-column layout with
// the root column), so that calibrate.ParseSweep reads a GPU communicator's sweep like any other:
// the preamble names the collective, the ranks on the device and what ran (note), then a row per
// size, then the average bus bandwidth. The sizes step by 4x after 2 warm-up calls.
func WriteTable(w io.Writer, coll costmodel.Coll, ranks int, device, note string, iters int, rows []TableRow) error {
	return Table{Coll: coll, Ranks: ranks, Device: device, Note: note, Warmup: 2, Iters: iters, StepFactor: 4}.Write(w, rows)
}

// Write writes rows under t's preamble (see WriteTable); the closing "Out of bounds values" line
// sums the rows' wrong counts (N/A counts none) and says FAILED when any is wrong.
func (t Table) Write(w io.Writer, rows []TableRow) error {
	coll, ranks := t.Coll, t.Ranks
	if len(rows) == 0 {
		return fmt.Errorf("cuda: a table needs rows")
	}
	prog := Programs[coll]
	step := fmt.Sprintf("%d(factor)", t.StepFactor)
	if t.StepFactor <= 1 {
		step = fmt.Sprintf("%d(bytes)", t.StepBytes)
	}
	fmt.Fprintf(w, "# collbench version 0.1.0 nccl-headers=0 nccl-library=0\n# Collective test starting: %s\n", prog)
	fmt.Fprintf(w, "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %s warmup iters: %d iters: %d agg iters: 1 validation: 0 graph: 0\n",
		rows[0].Bytes, rows[len(rows)-1].Bytes, step, t.Warmup, t.Iters)
	fmt.Fprintf(w, "# collplan GPU communicator: %s\n#\n# Using devices\n", t.Note)
	for r := range ranks {
		fmt.Fprintf(w, "#  Rank %2d Group  0 Pid      0 on        gpu device  0 [0000:00:00] %s\n", r, t.Device)
	}
	fmt.Fprintf(w, "#\n%s\n%s\n%s\n",
		"#                                                              out-of-place                       in-place          ",
		"#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ",
		"#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         ")
	sum, nb, wrongs := 0.0, 0, 0
	for _, row := range rows {
		line := fmt.Sprintf("%12d  %12d  %8s  %6s  %6d", row.Bytes, row.Count, row.Type, row.Redop, row.Root)
		for _, h := range []struct {
			us    float64
			wrong int
		}{{row.OOPUs, row.OOPWrong}, {row.IPUs, row.IPWrong}} {
			algbw := 0.0
			if h.us > 0 {
				algbw = float64(row.Bytes) / 1e3 / h.us
			}
			busbw := algbw * BusFactor(coll, ranks)
			sum += busbw
			nb++
			wrong := "N/A"
			if h.wrong >= 0 {
				wrong = strconv.Itoa(h.wrong)
				wrongs += h.wrong
			}
			line += fmt.Sprintf("  %7.2f  %6.2f  %6.2f  %6s", h.us, algbw, busbw, wrong)
		}
		fmt.Fprintln(w, line)
	}
	status := "OK"
	if wrongs > 0 {
		status = "FAILED"
	}
	_, err := fmt.Fprintf(w, "# Out of bounds values : %d %s\n# Avg bus bandwidth    : %g \n#\n# Collective test concluded: %s\n#\n", wrongs, status, sum/float64(nb), prog)
	return err
}
