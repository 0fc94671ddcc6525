// Command tuner-nccl is a collplan tuner plugin: the NCCL 2.30 policy (plugin/policy/nccl): no edits, and NCCL's default constants and corrections at init.
//
// The planner starts it (planner explain --tuner nccl --tuner-config FILE ...); run by hand,
// tuner-nccl -check FILE checks a configuration file and reports its errors.
package main

import (
	"context"
	"io"
	"os"

	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/plugin/policy/nccl"
)

// configDoc is the configuration format, printed by -h.
const configDoc = `configuration: none (give no --tuner-config, and no -check FILE): the policy decides as stock NCCL
2.30 does, with no edits, and hands the host NCCL's default constants and corrections at init:

  planner explain --node h200 --coll allreduce --bytes 1M --tuner nccl

See go doc github.com/collplan/collplan/plugin/policy/nccl.`

func main() {
	err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	os.Exit(plugin.ExitStatus(os.Stderr, "tuner-nccl", err))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return plugin.RunCommand(ctx, "tuner-nccl", configDoc, nccl.New, args, stdout, stderr)
}
