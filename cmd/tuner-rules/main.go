// Command tuner-rules is a collplan tuner plugin: the rules policy (plugin/policy/rules): NCCL's example CSV format (collective,minbytes,maxbytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff]]), first match wins.
//
// The planner starts it (planner explain --tuner rules --tuner-config FILE ...); run by hand,
// tuner-rules -check FILE checks a configuration file and reports its errors.
package main

import (
	"context"
	"io"
	"os"

	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/plugin/policy/rules"
)

// configDoc is the configuration format, printed by -h.
const configDoc = `configuration: NCCL's example tuner CSV, one rule per line (blank lines and # comments skipped):

  collective,minbytes,maxbytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff]]

for example AllReduce from 1 KiB up on Ring/Simple, any channel count, node count and rank count:

  allreduce,1024,68719476736,ring,simple,-1,-1,-1

Sizes are inclusive byte counts of NCCL's nBytes; -1 is "any" (channels -1 keeps the planner's).
The first rule that matches (and whose cell is legal) forces its cell. The whole format:
go doc github.com/collplan/collplan/plugin/policy/rules (plugin/policy/rules/rules.go).`

func main() {
	err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	os.Exit(plugin.ExitStatus(os.Stderr, "tuner-rules", err))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return plugin.RunCommand(ctx, "tuner-rules", configDoc, rules.New, args, stdout, stderr)
}
