// Package profile reads the dumps that the NCCL profiler plugin in libnccl-tuner-collplan.so
// writes (plugin/ncclshim/profiler.c; the format is docs/profile-dump.md): one JSON object per line,
// a header, one line per collective the communicator ran, and, when the communicator was
// finalized, an end line with the record and drop counts.
//
// Read validates every line and names the file and line of the first one it rejects. Points
// groups a dump's timed collectives by (collective, algorithm, protocol, bytes) with their median
// time; CalibratePoints (calibrate.go) turns those into calibrate's fit points, each credited to the
// one cell NCCL ran.
package profile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
)

// SchemaVersion is the dump schema this package reads (the header's "schema").
const SchemaVersion = 1

// maxLine bounds one line: a collective's line is about 300 bytes, the header under 1 KiB.
const maxLine = 64 << 10

// Header is a dump's first line.
type Header struct {
	Schema   int     `json:"schema"`
	Profiler int     `json:"profiler"` // NCCL's profiler ABI: 5 or 6
	Host     string  `json:"host"`
	PID      int     `json:"pid"`
	CommID   string  `json:"commId"`   // 16 hex digits, as in the file name and the tuner's logs
	CommName *string `json:"commName"` // nil when NCCL gave none
	NNodes   int     `json:"nNodes"`
	NRanks   int     `json:"nRanks"`
	Rank     int     `json:"rank"`
	MaxBytes int64   `json:"maxBytes"` // the file's cap (COLLPLAN_PROFILE_MAX_MB)
}

// Coll is one collective the communicator ran.
type Coll struct {
	Line      int    `json:"-"` // line in the file
	Seq       uint64 `json:"seq"`
	Coll      string `json:"coll"` // NCCL's name: AllReduce, AllGather, ...
	Algo      string `json:"algo"` // NCCL's name: RING, TREE, NVLS, ... (a symmetric kernel's variant)
	Proto     string `json:"proto"`
	NChannels int    `json:"nChannels"`
	Count     uint64 `json:"count"`
	Datatype  string `json:"datatype"` // NCCL's name: ncclFloat32, ...
	// Bytes is NCCL's model size: count x element size, x nRanks for AllGather and ReduceScatter.
	Bytes uint64 `json:"bytes"`
	// NumPipeOps is the group's collective count (the Coll events of the same kernel plan, NCCL's
	// Group event); nil when the events did not give it. NCCL's tuner sees ceil(count / the
	// communicator's channels), equal to it (1) whenever count <= channels.
	NumPipeOps     *int    `json:"numPipeOps"`
	KernelChannels int     `json:"kernelChannels"` // channels that reported both GPU timer stamps
	StartNs        *uint64 `json:"startNs"`        // first channel start (GPU globaltimer, ns)
	Ns             *uint64 `json:"ns"`             // last channel stop - first channel start; nil: no stamps
}

// Drops counts what the plugin could not write.
type Drops struct {
	RingFull   uint64 `json:"ringFull"`   // buffer full between two flushes
	PoolFull   uint64 `json:"poolFull"`   // event pool full (events in flight)
	Cap        uint64 `json:"cap"`        // past COLLPLAN_PROFILE_MAX_MB
	IO         uint64 `json:"io"`         // write errors
	Unfinished uint64 `json:"unfinished"` // collectives whose channels never all reported
}

// End is the last line, written at finalize.
type End struct {
	Records uint64 `json:"records"`
	Dropped Drops  `json:"dropped"`
}

// Dump is one communicator's dump.
type Dump struct {
	Path   string
	Header Header
	Colls  []Coll
	End    *End // nil when the communicator was not finalized (a running or crashed job)
}

var (
	commIDRe = regexp.MustCompile(`^[0-9a-f]{16}$`)
	collKind = map[string]bool{"Broadcast": true, "Reduce": true, "AllGather": true, "ReduceScatter": true,
		"AllReduce": true}
	// Element sizes of NCCL's datatype names (ncclDatatypeToString).
	dtypeSize = map[string]uint64{"ncclInt8": 1, "ncclUint8": 1, "ncclInt32": 4, "ncclUint32": 4, "ncclInt64": 8,
		"ncclUint64": 8, "ncclFloat16": 2, "ncclFloat32": 4, "ncclFloat64": 8, "ncclBfloat16": 2,
		"ncclFloat8e4m3": 1, "ncclFloat8e5m2": 1}
)

// Read parses and validates a dump; path names it in errors ("path:line: ...").
func Read(r io.Reader, path string) (Dump, error) {
	d := Dump{Path: path}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	line := 0
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s", path, line, fmt.Sprintf(format, args...))
	}
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			return d, bad("empty line")
		}
		var kind struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(text, &kind); err != nil {
			return d, bad("not a JSON object: %v", err)
		}
		if d.End != nil {
			return d, bad("%q line after the end line", kind.Type)
		}
		if line == 1 && kind.Type != "header" {
			return d, bad("first line is %q, want the header", kind.Type)
		}
		switch kind.Type {
		case "header":
			if line != 1 {
				return d, bad("a second header")
			}
			if err := strict(text, &struct {
				Type string `json:"type"`
				*Header
			}{Header: &d.Header}); err != nil {
				return d, bad("header: %v", err)
			}
			if err := d.Header.check(); err != nil {
				return d, bad("header: %v", err)
			}
		case "coll":
			c := Coll{Line: line}
			if err := strict(text, &struct {
				Type string `json:"type"`
				*Coll
			}{Coll: &c}); err != nil {
				return d, bad("coll: %v", err)
			}
			if err := c.check(d.Header.NRanks); err != nil {
				return d, bad("coll: %v", err)
			}
			d.Colls = append(d.Colls, c)
		case "end":
			var e End
			if err := strict(text, &struct {
				Type string `json:"type"`
				*End
			}{End: &e}); err != nil {
				return d, bad("end: %v", err)
			}
			if e.Records != uint64(len(d.Colls)) {
				return d, bad("end: records %d, but the file holds %d", e.Records, len(d.Colls))
			}
			d.End = &e
		default:
			return d, bad("unknown line type %q", kind.Type)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return d, fmt.Errorf("%s:%d: line longer than %d bytes", path, line+1, maxLine)
		}
		return d, fmt.Errorf("%s: %w", path, err)
	}
	if line == 0 {
		return d, fmt.Errorf("%s: empty file (no header)", path)
	}
	return d, nil
}

// strict decodes one line, refusing unknown and missing-by-typo fields.
func strict(text []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the object")
	}
	return nil
}

func (h *Header) check() error {
	switch {
	case h.Schema != SchemaVersion:
		return fmt.Errorf("schema %d, this reader reads %d", h.Schema, SchemaVersion)
	case h.Profiler != 5 && h.Profiler != 6:
		return fmt.Errorf("profiler ABI %d, want 5 or 6", h.Profiler)
	case !commIDRe.MatchString(h.CommID):
		return fmt.Errorf("commId %q is not 16 hex digits", h.CommID)
	case h.NRanks < 1:
		return fmt.Errorf("nRanks %d, want >= 1", h.NRanks)
	case h.Rank < 0 || h.Rank >= h.NRanks:
		return fmt.Errorf("rank %d outside 0..%d", h.Rank, h.NRanks-1)
	case h.NNodes < 1 || h.NNodes > h.NRanks:
		return fmt.Errorf("nNodes %d outside 1..nRanks (%d)", h.NNodes, h.NRanks)
	case h.PID <= 0:
		return fmt.Errorf("pid %d", h.PID)
	case h.MaxBytes < 0:
		return fmt.Errorf("maxBytes %d", h.MaxBytes)
	}
	return nil
}

func (c *Coll) check(nRanks int) error {
	if !collKind[c.Coll] {
		return fmt.Errorf("collective %q is not one NCCL's model covers", c.Coll)
	}
	if c.Algo == "" {
		return errors.New("empty algo")
	}
	if c.NChannels < 0 || c.NChannels > 255 {
		return fmt.Errorf("nChannels %d outside 0..255", c.NChannels)
	}
	if size, ok := dtypeSize[c.Datatype]; ok {
		want, ranks := c.Count*size, ""
		if c.Coll == "AllGather" || c.Coll == "ReduceScatter" {
			want *= uint64(nRanks)
			ranks = fmt.Sprintf(" x %d ranks", nRanks)
		}
		if c.Bytes != want {
			return fmt.Errorf("bytes %d, but count %d x %s (%d B)%s is %d", c.Bytes, c.Count, c.Datatype, size, ranks,
				want)
		}
	}
	if c.NumPipeOps != nil && *c.NumPipeOps < 1 {
		return fmt.Errorf("numPipeOps %d, want >= 1 or null", *c.NumPipeOps)
	}
	if c.KernelChannels < 0 || c.KernelChannels > c.NChannels {
		return fmt.Errorf("kernelChannels %d outside 0..nChannels (%d)", c.KernelChannels, c.NChannels)
	}
	if (c.Ns == nil) != (c.StartNs == nil) || (c.Ns == nil) != (c.KernelChannels == 0) {
		return errors.New("ns and startNs must both be set when kernelChannels > 0, and both null otherwise")
	}
	return nil
}

// Point is the median time of one (collective, algorithm, protocol, bytes) over a dump's timed
// collectives.
type Point struct {
	Coll, Algo, Proto string
	Bytes             uint64
	Line              int     // the first collective's line in the file
	N                 int     // collectives behind it
	MedianUS          float64 // median of their durations, µs
}

// MedianUS is the median of durations ns (nanoseconds), in microseconds; it sorts ns. The mean of
// the two middle values for an even count.
func MedianUS(ns []uint64) float64 {
	slices.Sort(ns)
	m := float64(ns[len(ns)/2])
	if len(ns)%2 == 0 {
		m = (float64(ns[len(ns)/2-1]) + float64(ns[len(ns)/2])) / 2
	}
	return m / 1e3
}

// Points groups the timed collectives (those with a duration), sorted by collective, algorithm,
// protocol and bytes.
func (d Dump) Points() []Point {
	type key struct {
		coll, algo, proto string
		bytes             uint64
	}
	groups := map[key][]uint64{}
	first := map[key]int{}
	for _, c := range d.Colls {
		if c.Ns == nil {
			continue
		}
		k := key{c.Coll, c.Algo, c.Proto, c.Bytes}
		if _, ok := first[k]; !ok {
			first[k] = c.Line
		}
		groups[k] = append(groups[k], *c.Ns)
	}
	pts := make([]Point, 0, len(groups))
	for k, ns := range groups {
		pts = append(pts, Point{Coll: k.coll, Algo: k.algo, Proto: k.proto, Bytes: k.bytes, Line: first[k], N: len(ns),
			MedianUS: MedianUS(ns)})
	}
	sort.Slice(pts, func(i, j int) bool {
		a, b := pts[i], pts[j]
		if a.Coll != b.Coll {
			return a.Coll < b.Coll
		}
		if a.Algo != b.Algo {
			return a.Algo < b.Algo
		}
		if a.Proto != b.Proto {
			return a.Proto < b.Proto
		}
		return a.Bytes < b.Bytes
	})
	return pts
}
