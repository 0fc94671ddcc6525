// Command tuner-table is a collplan tuner plugin: the node-table policy (plugin/policy/table): the host decides as a planner over the node table given with --tuner-config (and its fitted overlay) would.
//
// The planner starts it (planner explain --tuner table --tuner-config FILE ...); run by hand,
// tuner-table -check FILE checks a configuration file and reports its errors.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/plugin/policy/table"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tuner-table:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return plugin.RunCommand(ctx, "tuner-table", table.New, args, stdout, stderr)
}
