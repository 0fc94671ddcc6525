package main

import (
	"context"
	"io"

	"github.com/collplan/collplan/report"
)

func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("explain", stderr, true)
	asJSON := c.fs.Bool("json", false, "print one JSON object")
	decisionOnly := c.fs.Bool("decision", false, "with --json: print the decision without its explanation (menu, env, edits, overlay), as POST /v1/plan answers it")
	s, cls, pl, help, err := c.parse(args)
	if help || err != nil {
		return err
	}
	n, err := parseBytes("--bytes", c.cf.bytes)
	if err != nil {
		return err
	}
	if *decisionOnly && !*asJSON {
		return usagef("--decision needs --json")
	}
	pr, err := prepare(ctx, pl, cls)
	if err != nil {
		return err
	}
	if *decisionOnly {
		p, err := pr.Pick(n)
		if err != nil {
			return usageError{err}
		}
		d := report.NewDecision(s.Setup, pr, n, p)
		_, err = stdout.Write(append(d.AppendJSON(nil), '\n'))
		return err
	}
	plan, err := pr.Explain(n)
	if err != nil {
		return usageError{err}
	}
	out := report.NewPlan(s.Setup, plan)
	if *asJSON {
		return out.WriteJSON(stdout)
	}
	return out.WriteText(stdout)
}
