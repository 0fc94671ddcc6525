// Command planner answers "which plan would NCCL pick, and why" offline: explain one call, map a
// size range, answer a stream of queries, list the node tables.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
)

// usageError marks bad input: the command exits with status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

const usage = `usage: planner COMMAND [flags]

commands:
  explain   plan one collective call and show the whole priced menu
  query     read queries (CSV or JSON lines) on stdin, write plans on stdout
  map       the winning plan per size over a range, every crossover, optional SVG plot
  tables    list node tables, or show one: planner tables [--json] [NAME]
  compile   write the decision table of the NCCL tuner shim (docs/tuner-table.md)
  compare   score two tuners against pinned sweeps: each one's pick and regret per size
  diff      two node tables or overlays, or one table under two tuners: where the pick changed
  serve     the planner as an HTTP/JSON service (docs/service.md)
  show-decisions  what NCCL ran per collective and size (a TUNING log) beside what collplan picks

Run 'planner COMMAND -h' (or 'planner help COMMAND') for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	openTuners.closeAll()
	stop()
	os.Exit(exitCode(os.Stderr, err))
}

// run executes one planner command. -h prints the command's usage to stdout.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	err := dispatch(ctx, args, stdin, stdout, stderr)
	var h helpRequest
	if errors.As(err, &h) {
		_, err = io.WriteString(stdout, h.usage)
	}
	return err
}

// serveStarted, when set (by tests), learns the address planner serve listens on.
var serveStarted func(addr string)

func dispatch(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("no command (run 'planner -h' for the commands)")
	}
	switch args[0] {
	case "explain":
		return runExplain(ctx, args[1:], stdout, stderr)
	case "query":
		return runQuery(ctx, args[1:], stdin, stdout, stderr)
	case "map":
		return runMap(ctx, args[1:], stdout, stderr)
	case "tables":
		return runTables(args[1:], stdout, stderr)
	case "compile":
		return runCompile(ctx, args[1:], stdout, stderr)
	case "compare":
		return runCompare(ctx, args[1:], stdout, stderr)
	case "diff":
		return runDiff(ctx, args[1:], stdout, stderr)
	case "show-decisions":
		return runShowDecisions(ctx, args[1:], stdout, stderr)
	case "serve":
		return runServe(ctx, args[1:], stderr, serveStarted)
	case "-h", "--help", "help":
		if len(args) == 2 && args[0] == "help" {
			if _, ok := commandDocs[args[1]]; ok {
				return dispatch(ctx, []string{args[1], "-h"}, stdin, stdout, stderr)
			}
			return usagef("help: unknown command %q (run 'planner -h' for the commands)", args[1])
		}
		fmt.Fprint(stdout, usage)
		return nil
	}
	return usagef("unknown command %q (run 'planner -h' for the commands)", args[0])
}
