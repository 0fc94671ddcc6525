package main

import (
	"context"
	"io"
)

func runNCCLLog(_ context.Context, args []string, stdout, stderr io.Writer) error {
	return usagef("nccl-log: not yet")
}
