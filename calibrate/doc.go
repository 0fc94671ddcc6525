// Package calibrate reads measured collective performance and fits the cost model to it.
//
// Fit (fit.go) adjusts the effective latency and bandwidth of each pinned cell to the measured
// points with gonum/optimize (a robust loss on log(predicted/measured), regularised toward the
// prior table), with an uncertainty per parameter; points whose -I per-iteration CV is high weigh
// less. It fits the pinned points first; partial and free sweeps then constrain the minimum over
// the cells they allow, less the measured cells their own pinned sweeps show slower there, without
// moving a measured cell: the cells they alone constrain are Inferred, never Identified, from
// several starts.
// FitCorrected (corrections.go) then fits per-bucket bandwidth factors (NCCL's
// treeCorrectionFactor idea) where a cell's pinned points in a log2 size bucket keep a significant,
// consistent residual, and refits the cells over them. WriteOverlay writes the result as a node
// table's fitted overlay ([[fit.cell]] at the fitted node count, and the whole [corrections] table
// when bucket factors were fitted) and BuildReport scores the prior and fitted pickers against the
// measurements (report.go).
//
// The inputs are text that real clusters produce, so every parser accepts the mess around the data
// and names the file and line of every line it rejects:
//
//   - nccl-tests tables (ParseSweep, ParseSweeps) in the layouts of reference/nccl-costmodel.md §12
//     and its addendum: current (v2.19.6), pre-2.19.6 widths and the older 12-column form (no root
//     column, a float error column), with -I per-iteration columns and -S timestamps. The same
//     parser reads collbench output, whose preamble names the pinned NCCL_ALGO/NCCL_PROTO.
//   - NCCL's TUNING log (ParseTuning): the per-call decision lines in the three historical formats
//     of §8.1 and the model table NCCL prints at init (§7).
//   - NCCL's GRAPH log lines (ParseGraphs), turned into the [graphs.*] tables of a topology file
//     (TopologyGraphs, WriteTopologyGraphs).
//   - A whole NCCL log in one pass (ParseNCCLLog): both of the above and the first communicator's
//     init facts, written as a complete topology file whose missing inputs are tagged "estimate"
//     (NCCLLog.TopologyFile), and checked against a planner (CheckDecisions, CheckModelTable).
//   - A sweeps.toml manifest (LoadManifest, DecodeManifest), whole directories and single sweep
//     files (LoadSweeps, and List for calibrate list), which decide each sweep's Pin: the manifest
//     first, then NCCL_ALGO/NCCL_PROTO lines in the file, else free choice.
//
// Launcher prefixes are removed before parsing: mpirun --tag-output's "[1,0]<stdout>:" (which
// may appear several times on one physical line when a row reached mpirun in pieces; the pieces
// are joined per rank), srun --label's "0: " and hydra mpiexec -prepend-rank's "[0] " (a rank, not
// a timestamp). NCCL INFO/WARN lines between table rows are skipped, after reading what they say
// about the NCCL version and the NCCL_ALGO/NCCL_PROTO environment. A run without its "Collective
// test starting" line gets its collective from its columns and busbw/algbw, with a warning; rows
// with absurd times, sizes measured twice with conflicting times, fractional or oversized sizes
// and lines with NUL bytes are problems naming file and line, and are not fitted.
//
// Points decides which cells a sweep measured as NCCL does: a planner over the topology with the
// sweep's pin as its env (so an explicit NCCL_PROTO naming LL128 lifts the LL128 gate), and takes
// one half of each row, in place by default (PointOptions).
//
// Sizes are recorded as printed. For nccl-tests that is the full buffer for AllGather and
// ReduceScatter (the count column is per rank, §15 item 10), which is NCCL's model nBytes. NCCL's
// own TUNING lines print count*elt instead, per rank for AllGather and ReduceScatter (§8.1).
package calibrate
