package calibrate

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/collplan/collplan/capabilities"
)

// addSeeds adds every file of testdata/<dir> to the fuzz corpus.
func addSeeds(f *testing.F, dirs ...string) {
	f.Helper()
	for _, dir := range dirs {
		paths, err := filepath.Glob(filepath.Join("testdata", dir, "*"))
		if err != nil {
			f.Fatal(err)
		}
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
}

// lineCount is the number of physical lines, as the parsers count them.
func lineCount(data []byte) int {
	n := bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		n++
	}
	return n
}

// checkProblems fails unless every problem names file and a line of the input (or the one past it).
func checkProblems(t *testing.T, file string, nlines int, ps []Problem) {
	t.Helper()
	for _, p := range ps {
		if p.File != file || p.Line < 1 || p.Line > nlines+1 {
			t.Fatalf("problem %q does not name %s and a line in 1..%d", p.Error(), file, nlines+1)
		}
	}
}

// errProblems returns the problems an error carries; other errors fail the test.
func errProblems(t *testing.T, err error) []Problem {
	t.Helper()
	if err == nil {
		return nil
	}
	var ps Problems
	if errors.As(err, &ps) {
		return ps
	}
	var p Problem
	if errors.As(err, &p) {
		return []Problem{p}
	}
	t.Fatalf("error without file and line: %v", err)
	return nil
}

func finiteNonNegative(vs ...float64) bool {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return false
		}
	}
	return true
}

func FuzzParseSweep(f *testing.F) {
	addSeeds(f, "sweeps")
	f.Add([]byte("#  Rank  0 Group  0 Pid 1 on h device  0 [0000:41:00] NVIDIA H100\n" +
		"  1024  256  float  sum  -1h:1:1 [0] NCCL INFO AllReduce: 1024 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}\n" +
		"  9.80  0.10  0.18  0h:1:1 [0] NCCL INFO x\n  9.80  0.10  0.18  0\n### ALGO=Tree size=1024\n"))
	f.Add([]byte("#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n" +
		"[1,0]<stdout>:  1024  256  float  sum  -1  9.8[1,0]<stdout>:0  0.10  0.18  0  9.80  0.10  0.18  N/A\n" +
		"# Out of bounds values : 0 OK\n"))
	f.Add([]byte(" 0:   1024  256  float  sum  19.42  0.05  0.08  1e-06  19.42  0.05  0.08  2e-01*\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const file = "fuzz.txt"
		n := lineCount(data)
		ss, err := ParseSweeps(file, bytes.NewReader(data))
		if err != nil {
			checkProblems(t, file, n, errProblems(t, err))
			return
		}
		if len(ss) == 0 {
			t.Fatal("no sweeps and no error")
		}
		for _, s := range ss {
			checkProblems(t, file, n, s.Bad)
			checkProblems(t, file, n, s.Warnings)
			for _, r := range s.Rows {
				if r.Line < 1 || r.Line > n || r.Bytes < 0 || r.Count < 0 {
					t.Fatalf("bad row %+v", r)
				}
				for _, h := range []Half{r.OOP, r.IP} {
					if !finiteNonNegative(h.TimeUS, h.AlgBW, h.BusBW, h.IterMinUS, h.IterMaxUS, h.IterP99US, h.IterCVPct) {
						t.Fatalf("non-finite or negative value in %+v", r)
					}
					if h.Valid && (h.TimeUS <= 0 || h.Wrong > 0) {
						t.Fatalf("invalid half marked valid: %+v", r)
					}
				}
			}
			if s.Pin.Source == "" || s.Layout == "" {
				t.Fatalf("sweep without pin source or layout: %+v", s)
			}
		}
		s, err := ParseSweep(file, bytes.NewReader(data))
		if err != nil || s.Line != ss[0].Line || len(s.Rows) != len(ss[0].Rows) {
			t.Fatalf("ParseSweep disagrees with ParseSweeps: %v", err)
		}
	})
}

func FuzzParseTuning(f *testing.F) {
	addSeeds(f, "tuning")
	f.Add([]byte("h:1:2 [0] NCCL INFO AllReduce: 4096 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}\n"))
	f.Add([]byte("[t] h:1:2 [0] NCCL INFO AllGather: 8 Bytes -> Algo 1 proto 0 time 15.050000\n" +
		"h:1:2 [0] NCCL INFO 4096 Bytes -> Algo 1 proto 0 time 15.050000\n"))
	f.Add([]byte("h:1:2 [0] NCCL INFO   Algorithm   |   Tree   |\nh:1:2 [0] NCCL INFO   Protocol    | LL | LL128 | Simple |\n" +
		"h:1:2 [0] NCCL INFO  Max NThreads | 512 | 640 | 512 |\nh:1:2 [0] NCCL INFO     AllReduce |  1.0/ 2.0 | 3.0/ 4.0 | 5.0/ 6.0 |\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const file = "fuzz.log"
		n := lineCount(data)
		ds, tb, err := ParseTuning(file, bytes.NewReader(data))
		checkProblems(t, file, n, errProblems(t, err))
		for _, d := range ds {
			if d.Line < 1 || d.Line > n || d.Bytes < 0 || d.Algo < 0 || d.Algo >= capabilities.NumAlgos ||
				d.Proto < 0 || d.Proto >= capabilities.NumProtos || d.ChannelLo > d.ChannelHi {
				t.Fatalf("bad decision %+v", d)
			}
			if (d.Format == Format224) != (d.TimeUS == -1 && d.ChannelLo >= 0) || math.IsNaN(d.TimeUS) || math.IsInf(d.TimeUS, 0) {
				t.Fatalf("bad time or channels in %+v", d)
			}
		}
		if tb != nil && (tb.Line < 1 || tb.Line > n) {
			t.Fatalf("table line %d out of 1..%d", tb.Line, n)
		}
	})
}

func FuzzParseGraphs(f *testing.F) {
	addSeeds(f, "graphs")
	f.Add([]byte("h:1:2 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 16, bw 20.000000/20.000000, type NVL/PIX, sameChannels 1\n" +
		"h:1:2 [0] NCCL INFO Pattern 3, crossNic 0, nChannels 16, bw 20.000000/20.000000, type NVL/PIX, sameChannels 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const file = "fuzz.log"
		n := lineCount(data)
		gs, err := ParseGraphs(file, bytes.NewReader(data))
		checkProblems(t, file, n, errProblems(t, err))
		for _, g := range gs {
			if g.Line < 1 || g.Line > n || g.File != file || !finiteNonNegative(g.BwIntra, g.BwInter) || g.NChannels < 0 {
				t.Fatalf("bad graph line %+v", g)
			}
		}
		var b strings.Builder
		err = WriteTopologyGraphs(&b, gs)
		if err != nil {
			var ps Problems
			if errors.As(err, &ps) {
				checkProblems(t, file, n, ps)
			}
			return
		}
		var raw map[string]any
		if _, err := toml.Decode(b.String(), &raw); err != nil {
			t.Fatalf("rendered graphs are not TOML: %v\n%s", err, b.String())
		}
	})
}

func FuzzDecodeManifest(f *testing.F) {
	addSeeds(f, "manifests")
	data, err := os.ReadFile(filepath.Join("testdata", "sweeps", ManifestName))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		const file = "fuzz.toml"
		m, err := DecodeManifest(file, data)
		if err != nil {
			checkProblems(t, file, lineCount(data), errProblems(t, err))
			return
		}
		for _, e := range m.Sweeps {
			if strings.TrimSpace(e.File) == "" || e.Nodes < 0 || e.GPUsPerNode < 0 {
				t.Fatalf("accepted a bad entry %+v", e)
			}
		}
	})
}
