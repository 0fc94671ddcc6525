// Command genlayout writes kernels/cuda/layout_gen.h from package engine's and package kernels'
// constants (see package wirelayout). It runs from kernels/cuda's go:generate line:
//
//	go generate ./kernels/cuda/
package main

import (
	"fmt"
	"os"

	"github.com/collplan/collplan/kernels/cuda/internal/wirelayout"
)

func main() {
	out := "layout_gen.h"
	if len(os.Args) == 2 {
		out = os.Args[1]
	}
	h, err := wirelayout.Header()
	if err == nil {
		err = os.WriteFile(out, h, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "genlayout:", err)
		os.Exit(1)
	}
}
