package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/report"
)

// runCompare scores two tuners offline against pinned sweeps: at every measured size, each tuner's
// pick, the measured time of that pick, and its regret against the fastest measured cell.
func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("compare", stderr, false)
	a := c.fs.String("a", "none", "tuner A: none, NAME or PATH")
	aCfg := c.fs.String("a-config", "", "configuration file for tuner A")
	b := c.fs.String("b", "none", "tuner B: none, NAME or PATH")
	bCfg := c.fs.String("b-config", "", "configuration file for tuner B")
	sweeps := c.fs.String("sweeps", "", "directory of sweeps, or a sweeps.toml manifest (pinned, algorithm-only, protocol-only and free runs)")
	halfFlag := c.fs.String("half", "ip", "the half of every row to score: ip (in place, as PyTorch runs; calibrate's default) or oop (out of place)")
	s, cls, _, help, err := c.parse(args)
	if help || err != nil {
		return err
	}
	half, err := calibrate.ParseHalf(*halfFlag)
	if err != nil {
		return usagef("--half %q: want oop or ip", *halfFlag)
	}
	if !c.tf.tuner.None() {
		return usagef("compare takes its tuners as --a and --b, not --tuner")
	}
	if *sweeps == "" {
		return usagef("--sweeps is required")
	}
	all, problems, err := calibrate.LoadSweeps(*sweeps)
	if err != nil {
		return usageError{err}
	}
	for _, p := range problems {
		fmt.Fprintln(stderr, "planner: compare:", p)
	}
	err = report.Compare(ctx, s.Setup, cls, [2]report.CompareTuner{compareTuner(*a, *aCfg, stderr), compareTuner(*b, *bCfg, stderr)},
		*sweeps, all, half, stdout, stderr)
	var ue usageError
	if err != nil && !errors.As(err, &ue) {
		return usageError{err} // every failure of a comparison is its input's: sweeps, topology, tuners
	}
	return err
}

// compareTuner opens a side's tuner as the planner's commands do (tunerFlags.client).
func compareTuner(name, config string, stderr io.Writer) report.CompareTuner {
	return report.CompareTuner{Name: name, Open: func() (*plugin.Client, error) {
		tf := tunerFlags{plugin.Spec{Name: name, Config: config}}
		return tf.client(stderr)
	}}
}
