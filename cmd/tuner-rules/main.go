// Command tuner-rules is a collplan tuner plugin: the rules policy (plugin/policy/rules): NCCL's example CSV format (collective,minbytes,maxbytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff]]), first match wins.
//
// The planner starts it (planner explain --tuner rules --tuner-config FILE ...); run by hand,
// tuner-rules -check FILE checks a configuration file and reports its errors.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/plugin/policy/rules"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tuner-rules:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return plugin.RunCommand(ctx, "tuner-rules", rules.New, args, stdout, stderr)
}
