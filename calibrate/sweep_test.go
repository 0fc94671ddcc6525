package calibrate

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/collplan/collplan/capabilities"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parseSweepsFile parses testdata/sweeps/name.
func parseSweepsFile(t *testing.T, name string) []*Sweep {
	t.Helper()
	path := filepath.Join("testdata", "sweeps", name)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	ss, err := ParseSweeps(path, f)
	require.NoError(t, err, "ParseSweeps(%s)", path)
	return ss
}

// facts are the preamble and footer facts a fixture should yield.
type facts struct {
	Tool, Layout, Program         string
	Coll                          capabilities.Coll
	CollKnown                     bool
	Dtype, Op                     string
	NCCLVersion, TestsVersion     string
	Ranks                         int
	Hosts                         []string
	Nodes, GPUsPerNode            int
	GPUName                       string
	MinBytes, MaxBytes            int64
	StepFactor, StepBytes         int64
	Check                         int
	PerIter, Timestamps           bool
	Failed, HasFooter             bool
	AvgBusBW                      float64
	PinAlgo, PinProto, PinSource  string
	Rows                          int
	BadLines, WarningLines        []int
	WarningSubstr                 []string
	FirstLine, LastLine           int
	FirstBytes, LastBytes         int64
	FirstOOPTime, LastIPTime      float64
	FirstIPValid, LastOOPValid    bool
	FirstRoot                     int
	FirstOOPWrong, FirstOOPErrAbs float64
	FirstStamp                    string
	FirstIterMin, FirstIterCV     float64
	FirstCount, LastCount         int64
	FirstAlgBW, LastBusBW         float64
	sweepLine                     int
}

func factsOf(s *Sweep) facts {
	f := facts{Tool: s.Tool, Layout: s.Layout, Program: s.Program, Coll: s.Coll, CollKnown: s.CollKnown,
		Dtype: s.Dtype, Op: s.Op, NCCLVersion: s.NCCLVersion, TestsVersion: s.TestsVersion, Ranks: s.Ranks,
		Hosts: s.Hosts, Nodes: s.Nodes, GPUsPerNode: s.GPUsPerNode, GPUName: s.GPUName,
		MinBytes: s.MinBytes, MaxBytes: s.MaxBytes, StepFactor: s.StepFactor, StepBytes: s.StepBytes,
		Check: s.Check, PerIter: s.PerIter, Timestamps: s.Timestamps, Failed: s.Failed, HasFooter: s.HasFooter,
		AvgBusBW: s.AvgBusBW, PinAlgo: s.Pin.Algo, PinProto: s.Pin.Proto, PinSource: s.Pin.Source,
		Rows: len(s.Rows), sweepLine: s.Line}
	for _, p := range s.Bad {
		f.BadLines = append(f.BadLines, p.Line)
	}
	for _, p := range s.Warnings {
		f.WarningLines = append(f.WarningLines, p.Line)
	}
	if n := len(s.Rows); n > 0 {
		first, last := s.Rows[0], s.Rows[n-1]
		f.FirstLine, f.LastLine = first.Line, last.Line
		f.FirstBytes, f.LastBytes = first.Bytes, last.Bytes
		f.FirstCount, f.LastCount = first.Count, last.Count
		f.FirstOOPTime, f.LastIPTime = first.OOP.TimeUS, last.IP.TimeUS
		f.FirstIPValid, f.LastOOPValid = first.IP.Valid, last.OOP.Valid
		f.FirstRoot = first.Root
		f.FirstOOPWrong, f.FirstOOPErrAbs = float64(first.OOP.Wrong), first.OOP.ErrorAbs
		f.FirstStamp = first.Stamp
		f.FirstIterMin, f.FirstIterCV = first.OOP.IterMinUS, first.OOP.IterCVPct
		f.FirstAlgBW, f.LastBusBW = first.OOP.AlgBW, last.OOP.BusBW
	}
	return f
}

// The expectations below were read off the fixture files by hand.
func TestParseSweepsFixtures(t *testing.T) {
	h100 := "NVIDIA H100 80GB HBM3"
	tests := []struct {
		file string
		want facts
	}{
		{"ar_current_h100_1n8g.txt", facts{Tool: "nccl-tests", Layout: LayoutCurrent, Program: "all_reduce_perf",
			Coll: capabilities.AllReduce, CollKnown: true, Dtype: "float", Op: "sum", NCCLVersion: "2.30.7",
			TestsVersion: "2.19.6", Ranks: 8, Hosts: []string{"h100-node-07"}, Nodes: 1, GPUsPerNode: 8, GPUName: h100,
			MinBytes: 8, MaxBytes: 8589934592, StepFactor: 2, Check: 1, HasFooter: true, AvgBusBW: 227.206,
			PinSource: "free", Rows: 31, FirstLine: 26, LastLine: 58, FirstBytes: 8, LastBytes: 8589934592,
			FirstCount: 2, LastCount: 2147483648, FirstOOPTime: 9.60, LastIPTime: 23721.5, FirstIPValid: true,
			LastOOPValid: true, FirstRoot: -1, FirstAlgBW: 0, LastBusBW: 617.75, sweepLine: 1}},
		{"ar_per_iter.txt", facts{Tool: "nccl-tests", Layout: LayoutCurrent, Program: "all_reduce_perf",
			Coll: capabilities.AllReduce, CollKnown: true, Dtype: "float", Op: "sum", NCCLVersion: "2.30.7",
			TestsVersion: "2.19.6", Ranks: 8, Hosts: []string{"h200-b12"}, Nodes: 1, GPUsPerNode: 8,
			GPUName: "NVIDIA H200", MinBytes: 1048576, MaxBytes: 16777216, StepFactor: 2, Check: 1, PerIter: true,
			HasFooter: true, AvgBusBW: 293.974, PinSource: "free", Rows: 5, FirstLine: 19, LastLine: 23,
			FirstBytes: 1048576, LastBytes: 16777216, FirstCount: 262144, LastCount: 4194304, FirstOOPTime: 11.75,
			LastIPTime: 59.05, FirstIPValid: true, LastOOPValid: true, FirstRoot: -1, FirstIterMin: 10.93,
			FirstIterCV: 7.30, FirstAlgBW: 89.25, LastBusBW: 504.01, sweepLine: 1}},
		{"rs_timestamps.txt", facts{Tool: "nccl-tests", Layout: LayoutCurrent, Program: "reduce_scatter_perf",
			Coll: capabilities.ReduceScatter, CollKnown: true, Dtype: "float", Op: "sum", NCCLVersion: "2.27.3",
			TestsVersion: "2.19.6", Ranks: 4, Hosts: []string{"a100-n3"}, Nodes: 1, GPUsPerNode: 4,
			GPUName: "NVIDIA A100-SXM4-80GB", MinBytes: 65536, MaxBytes: 1048576, StepFactor: 4, Check: 1,
			Timestamps: true, HasFooter: true, AvgBusBW: 18.6283, PinSource: "free", Rows: 3, FirstLine: 14,
			LastLine: 16, FirstBytes: 65536, LastBytes: 1048576, FirstCount: 4096, LastCount: 65536,
			FirstOOPTime: 14.36, LastIPTime: 19.84, FirstIPValid: true, LastOOPValid: true, FirstRoot: -1,
			FirstStamp: "2025-06-11 09:14:10", FirstAlgBW: 4.56, LastBusBW: 39.88, sweepLine: 1}},
		// No "Collective test starting" line: redop sum, bytes = elements x 4 B and busbw/algbw 1.5
		// (2(n-1)/n at the 4 ranks of the rank lines) say AllReduce.
		{"ar_old_12col_v100.txt", facts{Layout: Layout12Column, Coll: capabilities.AllReduce, CollKnown: true,
			Dtype: "float", Op: "sum", Ranks: 4,
			Hosts: []string{"dgx1"}, Nodes: 1, GPUsPerNode: 4, GPUName: "Tesla V100-SXM2-32GB", MinBytes: 8,
			MaxBytes: 134217728, StepFactor: 2, Check: 1, HasFooter: true, AvgBusBW: 20.9296, PinSource: "free",
			Rows: 25, WarningLines: []int{1}, WarningSubstr: []string{"nothing names the collective (no \"# Collective test starting\" line): inferred AllReduce from the columns (redop sum, bytes = elements x type size) and busbw/algbw 1.500 = 2(n-1)/n at n = 4"},
			FirstLine: 12, LastLine: 36, FirstBytes: 8, LastBytes: 134217728, FirstCount: 2, LastCount: 33554432,
			FirstOOPTime: 19.40, LastIPTime: 3053.7, FirstIPValid: true, LastOOPValid: true, FirstRoot: -1,
			FirstOOPWrong: -1, FirstOOPErrAbs: 0, FirstAlgBW: 0, LastBusBW: 68.05, sweepLine: 1}},
		{"ar_pre2196_a100_tree_simple.txt", facts{Layout: LayoutPre2196, Program: "all_reduce_perf",
			Coll: capabilities.AllReduce, CollKnown: true, Dtype: "float", Op: "sum", NCCLVersion: "2.18.5", Ranks: 8,
			Hosts: []string{"dgx-a100-2"}, Nodes: 1, GPUsPerNode: 8, GPUName: "NVIDIA A100-SXM4-40GB",
			MinBytes: 1024, MaxBytes: 268435456, StepFactor: 4, Check: 1, HasFooter: true, AvgBusBW: 108.59,
			PinAlgo: "Tree", PinProto: "Simple", PinSource: "file", Rows: 10, FirstLine: 22, LastLine: 31,
			FirstBytes: 1024, LastBytes: 268435456, FirstCount: 256, LastCount: 67108864, FirstOOPTime: 31.01,
			LastIPTime: 1445.0, FirstIPValid: true, LastOOPValid: true, FirstRoot: -1, FirstAlgBW: 0.03,
			LastBusBW: 324.86, sweepLine: 1}},
		{"ag_mpirun_tagged_2n8g.txt", facts{Tool: "nccl-tests", Layout: LayoutCurrent, Program: "all_gather_perf",
			Coll: capabilities.AllGather, CollKnown: true, Dtype: "float", Op: "none", NCCLVersion: "2.30.7",
			TestsVersion: "2.19.6", Ranks: 16, Hosts: []string{"gpu-a01", "gpu-a02"}, Nodes: 2, GPUsPerNode: 8,
			GPUName: h100, MinBytes: 8, MaxBytes: 16777216, StepFactor: 2, Check: 1, HasFooter: true,
			AvgBusBW: 31.2357, PinSource: "free", Rows: 22, FirstLine: 32, LastLine: 56, FirstBytes: 0,
			LastBytes: 16777216, FirstCount: 0, LastCount: 262144, FirstOOPTime: 0.20, LastIPTime: 70.32,
			FirstIPValid: true, LastOOPValid: true, FirstRoot: -1, FirstAlgBW: 0, LastBusBW: 226.33, sweepLine: 1}},
		{"ar_srun_2n8g_ll128.txt", facts{Tool: "nccl-tests", Layout: LayoutCurrent, Program: "all_reduce_perf",
			Coll: capabilities.AllReduce, CollKnown: true, Dtype: "float", Op: "sum", NCCLVersion: "2.30.7",
			TestsVersion: "2.19.6", Ranks: 16, Hosts: []string{"h200-p4d-001", "h200-p4d-002"}, Nodes: 2,
			GPUsPerNode: 8, GPUName: "NVIDIA H200", MinBytes: 256, MaxBytes: 1073741824, StepFactor: 16, Check: 0,
			HasFooter: true, AvgBusBW: 71.7108, PinProto: "LL128", PinSource: "file", Rows: 6, FirstLine: 30,
			LastLine: 36, FirstBytes: 256, LastBytes: 268435456, FirstCount: 64, LastCount: 67108864,
			FirstOOPTime: 44.10, LastIPTime: 2311.49, FirstIPValid: true, LastOOPValid: true, FirstRoot: -1,
			FirstOOPWrong: -1, FirstAlgBW: 0.01, LastBusBW: 220.97, sweepLine: 1}},
		{"ar_failed.txt", facts{Tool: "nccl-tests", Layout: LayoutCurrent, Program: "all_reduce_perf",
			Coll: capabilities.AllReduce, CollKnown: true, Dtype: "float", Op: "sum", NCCLVersion: "2.26.5",
			TestsVersion: "2.19.6", Ranks: 8, Hosts: []string{"node17"}, Nodes: 1, GPUsPerNode: 8, GPUName: h100,
			MinBytes: 1048576, MaxBytes: 67108864, StepFactor: 2, Check: 1, Failed: true, HasFooter: true,
			AvgBusBW: 355.364, PinSource: "free", Rows: 7, BadLines: []int{21, 23}, WarningLines: []int{25},
			WarningSubstr: []string{"FAILED"}, FirstLine: 18, LastLine: 24, FirstBytes: 1048576,
			LastBytes: 67108864, FirstCount: 262144, LastCount: 16777216, FirstOOPTime: 12.46, LastIPTime: 198.20,
			FirstIPValid: true, LastOOPValid: true, FirstRoot: -1, FirstAlgBW: 84.17, LastBusBW: 595.53, sweepLine: 1}},
		{"ar_truncated_corrupt.txt", facts{Tool: "nccl-tests", Layout: LayoutCurrent, Program: "all_reduce_perf",
			Coll: capabilities.AllReduce, CollKnown: true, Dtype: "float", Op: "sum", NCCLVersion: "2.28.5",
			TestsVersion: "2.19.6", Ranks: 5, Hosts: []string{"gpu-c03", "gpu-c04"}, Nodes: 2, GPUsPerNode: 0,
			GPUName: "NVIDIA A100-SXM4-80GB", MinBytes: 8, MaxBytes: 134217728, StepFactor: 2, Check: 1,
			PinSource: "free", Rows: 11, BadLines: []int{18, 20, 23, 26, 30, 34}, WarningLines: []int{32, 33, 29},
			WarningSubstr: []string{"Test CUDA failure", "Test failure", "no footer"}, FirstLine: 15, LastLine: 29,
			FirstBytes: 8, LastBytes: 131072, FirstCount: 2, LastCount: 32768, FirstOOPTime: 25.73,
			LastIPTime: 42.87, FirstIPValid: true, LastOOPValid: true, FirstRoot: -1, FirstAlgBW: 0,
			LastBusBW: 4.87, sweepLine: 1}},
		{"bc_additive_l40s.txt", facts{Tool: "nccl-tests", Layout: LayoutCurrent, Program: "broadcast_perf",
			Coll: capabilities.Broadcast, CollKnown: true, Dtype: "half", Op: "none", NCCLVersion: "2.30.7",
			TestsVersion: "2.19.6", Ranks: 8, Hosts: []string{"l40s-07"}, Nodes: 1, GPUsPerNode: 8,
			GPUName: "NVIDIA L40S", MinBytes: 0, MaxBytes: 4194304, StepBytes: 1048576, Check: 1, HasFooter: true,
			AvgBusBW: 13.209, PinSource: "free", Rows: 5, FirstLine: 18, LastLine: 22, FirstBytes: 0,
			LastBytes: 4194304, FirstCount: 0, LastCount: 2097152, FirstOOPTime: 0.30, LastIPTime: 225.66,
			FirstIPValid: true, LastOOPValid: true, FirstRoot: 0, FirstAlgBW: 0, LastBusBW: 18.51, sweepLine: 1}},
		{"collbench_ring_ll128.txt", facts{Tool: "collbench", Layout: LayoutCurrent, Program: "all_reduce_perf",
			Coll: capabilities.AllReduce, CollKnown: true, Dtype: "float", Op: "sum", NCCLVersion: "2.30.7",
			TestsVersion: "0.1.0", Ranks: 8, Hosts: []string{"h100-node-07"}, Nodes: 1, GPUsPerNode: 8,
			GPUName: h100, MinBytes: 4096, MaxBytes: 67108864, StepFactor: 4, Check: 1, HasFooter: true,
			AvgBusBW: 74.7756, PinAlgo: "Ring", PinProto: "LL128", PinSource: "file", Rows: 8, FirstLine: 20,
			LastLine: 27, FirstBytes: 4096, LastBytes: 67108864, FirstCount: 1024, LastCount: 16777216,
			FirstOOPTime: 39.81, LastIPTime: 460.1, FirstIPValid: true, LastOOPValid: true, FirstRoot: -1,
			FirstAlgBW: 0.10, LastBusBW: 258.75, sweepLine: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			ss := parseSweepsFile(t, tt.file)
			require.Len(t, ss, 1)
			got := factsOf(ss[0])
			want := tt.want
			gotSub := want.WarningSubstr
			want.WarningSubstr = nil
			assert.Equal(t, want, got)
			for i, sub := range gotSub {
				require.Greater(t, len(ss[0].Warnings), i)
				assert.Contains(t, ss[0].Warnings[i].Msg, sub)
			}
			for _, p := range append(append([]Problem{}, ss[0].Bad...), ss[0].Warnings...) {
				assert.Equal(t, filepath.Join("testdata", "sweeps", tt.file), p.File, "problem %v names its file", p)
				assert.Positive(t, p.Line, "problem %v names its line", p)
			}
		})
	}
}

func TestSweepRowsDetails(t *testing.T) {
	t.Run("INFO lines between rows are skipped", func(t *testing.T) {
		s := parseSweepsFile(t, "ar_current_h100_1n8g.txt")[0]
		// Lines 43 and 46 hold 1 MiB and 2 MiB; lines 44-45 are NCCL INFO lines.
		r1, r2 := s.Rows[17], s.Rows[18]
		assert.Equal(t, Row{Line: 43, Bytes: 1048576, Count: 262144, Type: "float", Redop: "sum", Root: -1,
			OOP: Half{TimeUS: 12.68, AlgBW: 82.70, BusBW: 144.73, Valid: true},
			IP:  Half{TimeUS: 12.58, AlgBW: 83.36, BusBW: 145.87, Valid: true}}, r1)
		assert.Equal(t, int64(2097152), r2.Bytes)
		assert.Equal(t, 46, r2.Line)
		assert.Equal(t, 23.76, r2.OOP.TimeUS)
		// Sizes double from 8 B to 8 GiB.
		for i, r := range s.Rows {
			assert.Equal(t, int64(8)<<i, r.Bytes)
			assert.Equal(t, r.Bytes/4, r.Count)
		}
	})
	t.Run("mpirun pieces are joined", func(t *testing.T) {
		s := parseSweepsFile(t, "ag_mpirun_tagged_2n8g.txt")[0]
		byBytes := map[int64]Row{}
		for _, r := range s.Rows {
			byBytes[r.Bytes] = r
		}
		// Line 39: two prefixed pieces on one line.
		assert.Equal(t, Row{Line: 39, Bytes: 1024, Count: 16, Type: "float", Redop: "none", Root: -1,
			OOP: Half{TimeUS: 18.26, AlgBW: 0.06, BusBW: 0.05, Valid: true},
			IP:  Half{TimeUS: 18.51, AlgBW: 0.06, BusBW: 0.05, Valid: true}}, byBytes[1024])
		// Line 47: three pieces, the second ends inside "19.07".
		assert.Equal(t, Half{TimeUS: 19.07, AlgBW: 3.44, BusBW: 3.22, Valid: true}, byBytes[65536].OOP)
		assert.Equal(t, 47, byBytes[65536].Line)
		// Lines 51-52: the row's first piece, another rank's INFO line, then the rest on the next line.
		assert.Equal(t, Row{Line: 51, Bytes: 1048576, Count: 16384, Type: "float", Redop: "none", Root: -1,
			OOP: Half{TimeUS: 21.62, AlgBW: 48.50, BusBW: 45.47, Valid: true},
			IP:  Half{TimeUS: 21.45, AlgBW: 48.88, BusBW: 45.83, Valid: true}}, byBytes[1048576])
		// Size-0 rows: all_gather rounds small per-rank counts down to 0.
		zeros := 0
		for _, r := range s.Rows {
			if r.Bytes == 0 {
				zeros++
				assert.True(t, r.OOP.Valid && r.IP.Valid)
			} else {
				assert.Zero(t, r.Bytes%(r.Count*4*16), "AllGather size is count × 4 B × 16 ranks")
			}
		}
		assert.Equal(t, 5, zeros)
	})
	t.Run("per-iteration columns", func(t *testing.T) {
		s := parseSweepsFile(t, "ar_per_iter.txt")[0]
		assert.Equal(t, Half{TimeUS: 11.75, AlgBW: 89.25, BusBW: 156.19, IterMinUS: 10.93, IterMaxUS: 16.57,
			IterP99US: 14.33, IterCVPct: 7.30, Valid: true}, s.Rows[0].OOP)
		assert.Equal(t, Half{TimeUS: 11.70, AlgBW: 89.62, BusBW: 156.84, IterMinUS: 10.88, IterMaxUS: 16.50,
			IterP99US: 14.27, IterCVPct: 8.30, Valid: true}, s.Rows[0].IP)
	})
	t.Run("old error column", func(t *testing.T) {
		s := parseSweepsFile(t, "ar_old_12col_v100.txt")[0]
		// Line 19: 1024 B, out-of-place error 1e-06 (within float's tolerance 1e-5).
		r := s.Rows[7]
		assert.Equal(t, 19, r.Line)
		assert.Equal(t, Half{TimeUS: 19.42, AlgBW: 0.05, BusBW: 0.08, Wrong: -1, ErrorAbs: 1e-6, Valid: true}, r.OOP)
		assert.Equal(t, Half{TimeUS: 19.42, AlgBW: 0.05, BusBW: 0.08, Wrong: -1, ErrorAbs: 0, Valid: true}, r.IP)
	})
	t.Run("-c 0 prints N/A", func(t *testing.T) {
		s := parseSweepsFile(t, "ar_srun_2n8g_ll128.txt")[0]
		for _, r := range s.Rows {
			assert.Equal(t, int64(-1), r.OOP.Wrong)
			assert.Equal(t, int64(-1), r.IP.Wrong)
			assert.True(t, r.OOP.Valid && r.IP.Valid)
		}
		assert.Equal(t, []int64{256, 4096, 65536, 1048576, 16777216, 268435456}, rowBytes(s))
	})
	t.Run("wrong rows are flagged, not dropped", func(t *testing.T) {
		s := parseSweepsFile(t, "ar_failed.txt")[0]
		r8, r32 := s.Rows[3], s.Rows[5]
		assert.Equal(t, int64(8388608), r8.Bytes)
		assert.True(t, r8.OOP.Valid)
		assert.False(t, r8.IP.Valid)
		assert.Equal(t, int64(1048580), r8.IP.Wrong, "%6g printed 1048576 as 1.04858e+06")
		assert.False(t, r32.OOP.Valid)
		assert.False(t, r32.IP.Valid)
		assert.Contains(t, s.Bad[0].Msg, "in-place #wrong 1.04858e+06")
		assert.Contains(t, s.Bad[1].Msg, "out-of-place #wrong 1.23457e+06, in-place #wrong 1.23457e+06")
		assert.Equal(t, 2, s.OutOfBounds)
	})
	t.Run("additive steps and size 0", func(t *testing.T) {
		s := parseSweepsFile(t, "bc_additive_l40s.txt")[0]
		assert.Equal(t, []int64{0, 1 << 20, 2 << 20, 3 << 20, 4 << 20}, rowBytes(s))
		assert.Equal(t, 0.31, s.Rows[0].IP.TimeUS)
	})
	t.Run("corrupt rows are named", func(t *testing.T) {
		s := parseSweepsFile(t, "ar_truncated_corrupt.txt")[0]
		msgs := map[int]string{}
		for _, p := range s.Bad {
			msgs[p.Line] = p.Msg
		}
		assert.Contains(t, msgs[18], "14 fields")
		assert.Contains(t, msgs[20], "garbled by an NCCL log line")
		assert.Contains(t, msgs[23], `"26.9x" is not a number`)
		assert.Contains(t, msgs[26], "size 16384 is not count 4069")
		assert.Contains(t, msgs[30], "9 fields")
		assert.Contains(t, msgs[34], "6 fields")
		assert.Equal(t, []int64{8, 16, 32, 128, 512, 1024, 4096, 8192, 32768, 65536, 131072}, rowBytes(s))
	})
}

func rowBytes(s *Sweep) []int64 {
	var out []int64
	for _, r := range s.Rows {
		out = append(out, r.Bytes)
	}
	return out
}

func TestParseSweepsMultiRun(t *testing.T) {
	ss := parseSweepsFile(t, "multi_run.txt")
	require.Len(t, ss, 2)
	assert.Equal(t, 1, ss[0].Line)
	assert.Equal(t, capabilities.AllReduce, ss[0].Coll)
	assert.Equal(t, []int64{1 << 20, 2 << 20, 4 << 20}, rowBytes(ss[0]))
	assert.Equal(t, 9.955, ss[0].AvgBusBW)
	assert.Equal(t, 20, ss[1].Line)
	assert.Equal(t, capabilities.AllGather, ss[1].Coll)
	assert.Equal(t, int64(131072), ss[1].Rows[0].Count)
	assert.Equal(t, 9.70, ss[1].AvgBusBW)
	assert.Equal(t, 2, ss[1].Ranks)

	path := filepath.Join("testdata", "sweeps", "multi_run.txt")
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	s, err := ParseSweep(path, f)
	require.NoError(t, err)
	assert.Equal(t, "all_reduce_perf", s.Program)
	require.Len(t, s.Warnings, 1)
	assert.Equal(t, path+":20: the file holds 2 runs; only the first is read here (use ParseSweeps)", s.Warnings[0].Error())
}

func TestParseSweepNoTable(t *testing.T) {
	for _, name := range []string{"notes.txt", "../tuning/tuning_2.23_h200_srun.log"} {
		path := filepath.Join("testdata", "sweeps", name)
		f, err := os.Open(path)
		require.NoError(t, err)
		_, err = ParseSweep(path, f)
		f.Close()
		var p Problem
		require.ErrorAs(t, err, &p)
		assert.Equal(t, path, p.File)
		assert.Positive(t, p.Line)
		assert.Contains(t, p.Msg, "no nccl-tests table")
	}
	_, err := ParseSweep("empty.txt", strings.NewReader(""))
	assert.EqualError(t, err, "empty.txt:1: no nccl-tests table (no header and no data row) in the file")
}

// Small inputs for the rules the fixtures do not reach.
func TestParseSweepInline(t *testing.T) {
	const hdr = "# Collective test starting: all_reduce_perf\n" +
		"#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong \n"
	parse := func(t *testing.T, text string) *Sweep {
		t.Helper()
		s, err := ParseSweep("x.txt", strings.NewReader(text))
		require.NoError(t, err)
		return s
	}
	t.Run("e notation and CRLF", func(t *testing.T) {
		s := parse(t, hdr+"  8589934592    2147483648     float     sum      -1  2.4e+04  353.00  617.75       0  1.2e+05   72.12  126.2       0\r\n")
		require.Len(t, s.Rows, 1)
		assert.Equal(t, 24000.0, s.Rows[0].OOP.TimeUS)
		assert.Equal(t, 120000.0, s.Rows[0].IP.TimeUS)
	})
	t.Run("row shape must match the header", func(t *testing.T) {
		s := parse(t, hdr+"     1048576        262144     float     sum    123.4    8.50   15.93  0e+00    121.0    8.67   16.25  0e+00\n")
		assert.Empty(t, s.Rows)
		require.Len(t, s.Bad, 1)
		assert.Equal(t, "x.txt:3: row has 12 fields but the table has 13: 1048576 262144 float sum 123.4 8.50 15.93 0e+00 121.0 8.67 16.25 0e+00", s.Bad[0].Error())
	})
	t.Run("no header: the first row sets the shape", func(t *testing.T) {
		s := parse(t, "     1048576        262144   float     sum    123.4    8.50   15.93  0e+00    121.0    8.67   16.25  2e-01*\n"+
			"     1048576        262144     float     sum      -1    25.31   41.43   72.50       0    25.06   41.85   73.23       0\n")
		assert.Equal(t, Layout12Column, s.Layout)
		require.Len(t, s.Rows, 1)
		assert.False(t, s.Rows[0].IP.Valid, "an error marked with * is not fitted")
		assert.Equal(t, 0.2, s.Rows[0].IP.ErrorAbs)
		require.Len(t, s.Bad, 2)
		assert.Contains(t, s.Bad[0].Msg, "in-place error 2e-01* over the tolerance 1e-05 of float")
		assert.Contains(t, s.Bad[1].Msg, "row has 13 fields but the table has 12")
	})
	t.Run("old error over tolerance for integers", func(t *testing.T) {
		s := parse(t, "        1024           256   int32     sum    19.42    0.05    0.08  1e+00    19.42    0.05    0.08    N/A\n")
		require.Len(t, s.Rows, 1)
		assert.False(t, s.Rows[0].OOP.Valid)
		assert.Equal(t, -1.0, s.Rows[0].IP.ErrorAbs)
		assert.True(t, s.Rows[0].IP.Valid)
	})
	t.Run("zero time is not fitted", func(t *testing.T) {
		s := parse(t, hdr+"        1024           256     float     sum      -1     0.00    0.00    0.00       0     9.80    0.10    0.18       0\n")
		require.Len(t, s.Rows, 1)
		assert.False(t, s.Rows[0].OOP.Valid)
		assert.Contains(t, s.Bad[0].Msg, "out-of-place time 0.00 µs")
	})
	t.Run("negative and unparsable values", func(t *testing.T) {
		s := parse(t, hdr+
			"        1024           256     float     sum      -1    -9.80    0.10    0.18       0     9.80    0.10    0.18       0\n"+
			"        1024           256     float     sum       x     9.80    0.10    0.18       0     9.80    0.10    0.18       0\n"+
			"        1024           -256     float     sum     -1     9.80    0.10    0.18       0     9.80    0.10    0.18       0\n"+
			"        1024           256       7.5     sum     -1     9.80    0.10    0.18       0     9.80    0.10    0.18       0\n"+
			"   1e3           256     float     sum     -1     9.80    0.10    0.18       0     9.80    0.10    0.18       0\n"+
			"        1024           256     float     sum     -1     9.80    0.10    0.18      -3     9.80    0.10    0.18       0\n"+
			"        1024           256     float     sum     -1     9.80    0.10    0.18       0     9.80     inf    0.18       0\n")
		assert.Empty(t, s.Rows)
		require.Len(t, s.Bad, 7, "%v", s.Bad)
		for i, want := range []string{`"-9.80" is negative`, `root "x"`, `count "-256"`, `type "7.5"`, `size "1e3"`, `#wrong "-3"`, `"inf" is not a number`} {
			assert.Contains(t, s.Bad[i].Msg, want)
		}
	})
	t.Run("footer variants", func(t *testing.T) {
		s := parse(t, hdr+"        1024           256     float     sum      -1     9.80    0.10    0.18       0     9.80    0.10    0.18       0\n"+
			"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.18 FAILED\n")
		assert.True(t, s.BWCheckFailed)
		assert.False(t, s.Failed)
		assert.True(t, s.Rows[0].OOP.Valid)
		s = parse(t, hdr+"        1024           256     float     sum      -1     9.80    0.10    0.18       0     9.80    0.10    0.18       0\n"+
			"# Avg bus bandwidth    : nan \n")
		assert.Contains(t, s.Warnings[0].Msg, "not a number")
	})
	t.Run("rows after a footer start a new run", func(t *testing.T) {
		row := "        1024           256     float     sum      -1     9.80    0.10    0.18       0     9.80    0.10    0.18       0\n"
		ss, err := ParseSweeps("x.txt", strings.NewReader(hdr+row+"# Out of bounds values : 0 OK\n"+row))
		require.NoError(t, err)
		require.Len(t, ss, 2)
		assert.Equal(t, 5, ss[1].Line)
		assert.False(t, ss[1].CollKnown)
	})
	t.Run("rows of the out-of-place half only", func(t *testing.T) {
		// A fork of nccl-tests that skips the in-place run (Panlichen/nccl-tests) prints 8 fields
		// under the 12-column header; with a root column it would be 9 under the 13-column one. A
		// short row among whole ones is a row cut off, as before.
		old := "#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
		s := parse(t, old+"          64            16     float     sum    65.27    0.00    0.00    N/A\n"+
			"         128            32     float     sum    68.36    0.00    0.00    N/A\n")
		require.Len(t, s.Rows, 2)
		assert.Empty(t, s.Bad)
		r := s.Rows[1]
		assert.True(t, r.OOPOnly)
		assert.Equal(t, 68.36, r.OOP.TimeUS)
		assert.True(t, r.OOP.Valid)
		assert.False(t, r.IP.Valid)
		assert.Zero(t, r.IP.TimeUS)
		require.NotEmpty(t, s.Warnings)
		assert.Equal(t, "x.txt:2: 2 rows with the out-of-place half only (no in-place columns): fit them with --half oop", s.Warnings[0].Error())

		s = parse(t, hdr+"        1024           256     float     sum      -1     9.80    0.10    0.18       0\n")
		require.Len(t, s.Rows, 1)
		assert.True(t, s.Rows[0].OOPOnly)
		assert.Equal(t, -1, s.Rows[0].Root)

		s = parse(t, hdr+"        1024           256     float     sum      -1     9.80    0.10    0.18       0     9.80    0.10    0.18       0\n"+
			"        2048           512     float     sum      -1    10.80    0.19    0.34       0\n")
		require.Len(t, s.Rows, 1)
		require.Len(t, s.Bad, 1)
		assert.Contains(t, s.Bad[0].Msg, "row has 9 fields but the table has 13")
	})
	t.Run("section lines start pinned runs", func(t *testing.T) {
		// A script looping over NCCL_ALGO echoes a section line before each run; the sections
		// after the first keep the file's preamble (here the collective and the header).
		row := func(b int) string {
			return fmt.Sprintf("  %10d  %12d     float     sum      -1  100.00  1.00  1.50       0  100.00  1.00  1.50       0\n", b, b/4)
		}
		text := "# nccl-tests version 2.19.6 nccl-headers=22902 nccl-library=22902\n" + hdr +
			"### ALGO=Ring size=1024\n" + row(1024) + "# Avg bus bandwidth    : 1.5 \n" +
			"### ALGO=Tree size=1024\n" + row(1024) + row(2048) +
			"# NCCL_ALGO=NVLS NCCL_PROTO=Simple\n" + row(4096) +
			"# PROTO=LL\n# ALGO=Ring\n" + row(4096) +
			"### ALGO=CollnetChain size=1024\nh: Test NCCL failure common.cu:1 'invalid usage'\n### ALGO=CollnetChain size=2048\n"
		ss, err := ParseSweeps("x.txt", strings.NewReader(text))
		require.NoError(t, err)
		require.Len(t, ss, 4)
		type run struct {
			line, rows  int
			algo, proto string
			coll        bool
			version     string
		}
		var got []run
		for _, s := range ss {
			got = append(got, run{s.Line, len(s.Rows), s.Pin.Algo, s.Pin.Proto, s.CollKnown && s.CollSource == CollFromProgram, s.NCCLVersion})
		}
		assert.Equal(t, []run{{1, 1, "Ring", "", true, "2.29.2"}, {7, 2, "Tree", "", true, "2.29.2"},
			{10, 1, "NVLS", "Simple", true, "2.29.2"}, {12, 1, "Ring", "LL", true, "2.29.2"}}, got)
		var msgs []string
		for _, w := range ss[3].Warnings {
			msgs = append(msgs, w.Error())
		}
		assert.Contains(t, msgs, "x.txt:15: section NCCL_ALGO=CollnetChain has no rows: the run printed none (not fitted)")
		assert.Contains(t, msgs, "x.txt:16: the run reports a failure: h: Test NCCL failure common.cu:1 'invalid usage'")
		// A comment that is not only KEY=VALUE words is no section.
		s := parse(t, hdr+row(1024)+"# note: ALGO=Ring was slow\n"+row(2048))
		assert.Len(t, s.Rows, 2)
		assert.True(t, s.Pin.IsFree())
	})
	t.Run("conflicting pin lines", func(t *testing.T) {
		s := parse(t, "# NCCL_ALGO=Ring\n# NCCL_ALGO=\"Tree\"\n# NCCL_PROTO=Fast\n"+hdr+
			"        1024           256     float     sum      -1     9.80    0.10    0.18       0     9.80    0.10    0.18       0\n")
		assert.Equal(t, "Ring", s.Pin.Algo)
		assert.Equal(t, "Fast", s.Pin.Proto)
		require.Len(t, s.Warnings, 3)
		assert.Equal(t, "x.txt:2: NCCL_ALGO=Tree differs from NCCL_ALGO=Ring on line 1; keeping the first", s.Warnings[0].Error())
		assert.Contains(t, s.Warnings[1].Msg, `unknown protocol "Fast"`)
	})
	t.Run("cputime header and empty pins", func(t *testing.T) {
		s := parse(t, "# NCCL_ALGO=\n# NCCL_PROTO=''\n"+strings.Replace(hdr, "   time", "cputime", 1)+
			"        1024           256     float     sum      -1     9.80    0.10    0.18       0     9.80    0.10    0.18       0\n")
		assert.True(t, s.CPUTime)
		assert.True(t, s.Pin.IsFree())
		assert.Equal(t, "free", s.Pin.Source)
	})
	t.Run("mixed types and versions", func(t *testing.T) {
		s := parse(t, "# nccl-tests version 2.13.8 nccl-headers=21805 nccl-library=21805\n"+
			"h:1:1 [0] NCCL INFO NCCL version 2.18.6+cuda12.2\n"+
			"h:1:1 [0] NCCL INFO NCCL version 2.18.5+cuda12.2\n"+hdr+
			"        1024           256     float     sum      -1     9.80    0.10    0.18       0     9.80    0.10    0.18       0\n"+
			"        1024           128    double     max      -1     9.80    0.10    0.18       0     9.80    0.10    0.18       0\n"+
			"#  Rank  0 Group  0 Pid      1 on          h device  0 [0000:1b:00] NVIDIA A100\n"+
			"#  Rank  1 Group  0 Pid      1 on          h device  1 [0000:1c:00] NVIDIA A40\n"+
			"#  Rank  2 Group  0 Pid      1 on          g device  0 [0000:1c:00] NVIDIA A40\n")
		assert.Equal(t, LayoutPre2196, s.Layout, "nccl-tests before 2.19.6")
		assert.Equal(t, "", s.Dtype)
		assert.Equal(t, "", s.Op)
		assert.Equal(t, "2.18.6", s.NCCLVersion)
		assert.Equal(t, "NVIDIA A100", s.GPUName)
		assert.Equal(t, 0, s.GPUsPerNode)
		var msgs []string
		for _, w := range s.Warnings {
			msgs = append(msgs, w.Msg)
		}
		assert.Equal(t, []string{"NCCL version 2.18.5 differs from 2.18.6 named earlier",
			"nccl-tests names NCCL 2.18.5 but NCCL's log says 2.18.6",
			"ranks run on different GPU models; GPUName is rank 0's",
			"no footer after the last row: the run may have been cut off"}, msgs)
	})
	t.Run("preamble without rows", func(t *testing.T) {
		ss, err := ParseSweeps("x.txt", strings.NewReader("# nccl-tests version 2.19.6 nccl-headers=23007 nccl-library=23007\n"+
			"# Collective test starting: alltoall_perf\nhost: Test NCCL failure common.cu:1005 'unhandled cuda error'\n"))
		require.NoError(t, err)
		require.Len(t, ss, 1)
		assert.False(t, ss[0].CollKnown)
		assert.Equal(t, "alltoall_perf", ss[0].Program)
		assert.Equal(t, "2.30.7", ss[0].NCCLVersion)
		require.Len(t, ss[0].Warnings, 2)
		assert.Contains(t, ss[0].Warnings[0].Msg, "Test NCCL failure")
		assert.Equal(t, "x.txt:1: the run has no data rows", ss[0].Warnings[1].Error())
	})
}

func TestVersionHelpers(t *testing.T) {
	assert.Equal(t, "2.30.7", versionFromCode("23007"))
	assert.Equal(t, "2.8.4", versionFromCode("2804"))
	assert.Equal(t, "", versionFromCode("x"))
	assert.True(t, versionLess("2.9.1", "2.19.6"))
	assert.True(t, versionLess("2.19", "2.19.6"))
	assert.False(t, versionLess("2.19.6", "2.19.6"))
	assert.False(t, versionLess("2.20.0a", "2.19.6"))
	c, ok := collFromProgram("/opt/nccl-tests/build/reduce_scatter_perf_mpi")
	assert.True(t, ok)
	assert.Equal(t, capabilities.ReduceScatter, c)
	_, ok = collFromProgram("sendrecv_perf")
	assert.False(t, ok)
	assert.Equal(t, int64(1), eltSize("char"))
	assert.Equal(t, int64(4), eltSize("int"))
	assert.Equal(t, int64(2), eltSize("bfloat16"))
	assert.Equal(t, int64(0), eltSize("mystery"))
}

func TestErrorToleranceAndClip(t *testing.T) {
	for typ, want := range map[string]float64{"half": 1e-2, "bfloat16": 1e-2, "float": 1e-5, "double": 1e-12,
		"int32": 0, "char": 0} {
		assert.Equal(t, want, errorTolerance(typ), typ)
	}
	long := strings.Repeat("1234 ", 40)
	assert.Len(t, clip(long), 120)
	assert.True(t, strings.HasSuffix(clip(long), "..."))
	assert.Equal(t, "a b", clip("  a \t b "))
}

func TestPinSource(t *testing.T) {
	tests := []struct {
		algoSrc, protoSrc, want string
	}{
		{"", "", "free"},
		{"file", "", "file"},
		{"", "file", "file"},
		{"manifest", "manifest", "manifest"},
		{"manifest", "file", "manifest+file"},
		{"file", "manifest", "manifest+file"},
	}
	for _, tt := range tests {
		p := Pin{AlgoSource: tt.algoSrc, ProtoSource: tt.protoSrc}
		p.fixSource()
		assert.Equal(t, tt.want, p.Source, "%+v", tt)
	}
	assert.True(t, Pin{}.IsFree())
	assert.False(t, Pin{Proto: "LL"}.IsFree())
}
