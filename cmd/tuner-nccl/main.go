// Command tuner-nccl is a collplan tuner plugin: the NCCL 2.30 policy (plugin/policy/nccl): no edits, and NCCL's default constants and corrections at init.
//
// The planner starts it (planner explain --tuner nccl --tuner-config FILE ...); run by hand,
// tuner-nccl -check FILE checks a configuration file and reports its errors.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/plugin/policy/nccl"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tuner-nccl:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return plugin.RunCommand(ctx, "tuner-nccl", nccl.New, args, stdout, stderr)
}
