package main

import (
	"context"
	"flag"
	"io"

	"github.com/collplan/collplan/calibrate"
)

const listDoc = `usage: calibrate list SWEEPS [--json]

Lists what calibrate reads of SWEEPS (a directory, a sweeps.toml manifest or one sweep file), as
the fit reads it: per run its collective (and whether a "Collective test starting" line, the
columns or the manifest named it), pin, NCCL and nccl-tests versions, ranks and layout; every row
with both halves (time, algbw, busbw, #wrong) and which halves can be fitted; and why any row, run
or file is dropped, each with its file and line. The fit uses one half of each row: the in-place
one unless --half oop.
`

// runList is calibrate list.
func runList(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("calibrate list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the listing as one JSON object")
	path, help, err := parseSub(fs, args, "calibrate list", listDoc, "SWEEPS", stdout)
	if help || err != nil {
		return err
	}
	l, err := calibrate.List(path)
	if err != nil {
		return usageError{err}
	}
	if *asJSON {
		return writeJSON(stdout, l)
	}
	return l.WriteText(stdout)
}
