// Command tuner-regions is a collplan tuner plugin: the regions policy (plugin/policy/regions): per collective, polygons in log2(bytes) x log2(ranks) space read from a TOML file; the first region containing the point wins.
//
// The planner starts it (planner explain --tuner regions --tuner-config FILE ...); run by hand,
// tuner-regions -check FILE checks a configuration file and reports its errors.
package main

import (
	"context"
	"io"
	"os"

	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/plugin/policy/regions"
)

// configDoc is the configuration format, printed by -h.
const configDoc = `configuration: TOML, one [[region]] per polygon in log2(bytes) x log2(ranks) space; the first
region containing (size, ranks) wins. For example Ring/LL on 4 channels for AllReduce below
16 KiB at 8 to 32 ranks:

  [[region]]
  coll = "allreduce"
  algo = "ring"
  proto = "ll"
  channels = 4
  polygon = [[0, 3], [14, 3], [14, 5], [0, 5]]   # [log2(bytes), log2(ranks)] vertices

Optional keys: name, action (force, the default; disable; add or scale with value), channels,
chunk. The whole format: go doc github.com/collplan/collplan/plugin/policy/regions
(plugin/policy/regions/regions.go; an example: plugin/policy/regions/testdata/regions.toml).`

func main() {
	err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	os.Exit(plugin.ExitStatus(os.Stderr, "tuner-regions", err))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return plugin.RunCommand(ctx, "tuner-regions", configDoc, regions.New, args, stdout, stderr)
}
