// Command tuner-regions is a collplan tuner plugin: the regions policy (plugin/policy/regions): per collective, polygons in log2(bytes) x log2(ranks) space read from a TOML file; the first region containing the point wins.
//
// The planner starts it (planner explain --tuner regions --tuner-config FILE ...); run by hand,
// tuner-regions -check FILE checks a configuration file and reports its errors.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/plugin/policy/regions"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tuner-regions:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return plugin.RunCommand(ctx, "tuner-regions", regions.New, args, stdout, stderr)
}
