package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/profile"
)

// loadDumps reads the profiler dumps at path: one JSONL file, or every *.jsonl in a directory
// (docs/profile-dump.md). Every dump must be of one shape (nodes, ranks), the shape the fit is at.
func loadDumps(path string) ([]profile.Dump, error) {
	files := []string{path}
	if st, err := os.Stat(path); err != nil {
		return nil, usagef("--dumps: %v", err)
	} else if st.IsDir() {
		m, err := filepath.Glob(filepath.Join(path, "*.jsonl"))
		if err != nil {
			return nil, usagef("--dumps: %v", err)
		}
		if len(m) == 0 {
			return nil, usagef("--dumps %s: no *.jsonl profiler dump in the directory", path)
		}
		slices.Sort(m)
		files = m
	}
	var ds []profile.Dump
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			return nil, usagef("--dumps: %v", err)
		}
		d, err := profile.Read(r, f)
		r.Close()
		if err != nil {
			return nil, usagef("--dumps: %v", err)
		}
		if len(ds) > 0 {
			h0, h := ds[0].Header, d.Header
			if h.NNodes != h0.NNodes || h.NRanks != h0.NRanks {
				return nil, usagef("--dumps: %s is %d ranks on %d nodes, %s %d on %d: fit one shape at a time",
					f, h.NRanks, h.NNodes, ds[0].Path, h0.NRanks, h0.NNodes)
			}
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// dumpPoints are the dumps' fit points: each (collective, cell, size)'s median measured time,
// credited to the cell NCCL ran. What is not a modelled cell is returned as warnings.
func dumpPoints(ds []profile.Dump) ([]calibrate.Point, []string) {
	var pts []calibrate.Point
	var warn []string
	for _, d := range ds {
		p, skipped := d.CalibratePoints()
		pts = append(pts, p...)
		warn = append(warn, skipped...)
	}
	return pts, warn
}

// dumpShape is the dumps' shape, nodes and ranks per node; an uneven spread is an error.
func dumpShape(ds []profile.Dump) (nodes, rpn int, err error) {
	h := ds[0].Header
	if h.NNodes < 1 || h.NRanks%h.NNodes != 0 {
		return 0, 0, usagef("--dumps %s: %d ranks on %d nodes is not a whole number of ranks per node", ds[0].Path, h.NRanks, h.NNodes)
	}
	return h.NNodes, h.NRanks / h.NNodes, nil
}

// dumpNames lists the dumps' files for messages.
func dumpNames(ds []profile.Dump) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Path)
	}
	return strings.Join(s, ", ")
}
