// Command tuner-table is a collplan tuner plugin: the node-table policy (plugin/policy/table): the host decides as a planner over the node table given with --tuner-config (and its fitted overlay) would.
//
// The planner starts it (planner explain --tuner table --tuner-config FILE ...); run by hand,
// tuner-table -check FILE checks a configuration file and reports its errors.
package main

import (
	"context"
	"io"
	"os"

	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/plugin/policy/table"
)

// configDoc is the configuration format, printed by -h.
const configDoc = `configuration: the path of a node table TOML file, read as 'planner --table FILE' reads it (its
fitted overlay FILE.fit.toml beside it applied: constants, corrections and fitted cells, the cells a
host's shape or env makes illegal skipped); the host then decides as a planner over that table
would. For example, with the repository's h100 table:

  planner explain --node h100 --bytes 1M --tuner table --tuner-config tables/h100.toml

The schema: tables/schema.go (go doc github.com/collplan/collplan/tables Node); the embedded
tables, tables/*.toml, are examples ('planner tables NAME' shows one with each number's source).`

func main() {
	err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	os.Exit(plugin.ExitStatus(os.Stderr, "tuner-table", err))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return plugin.RunCommand(ctx, "tuner-table", configDoc, table.New, args, stdout, stderr)
}
