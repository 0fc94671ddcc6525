package main

import (
	"errors"
	"fmt"

	"github.com/collplan/collplan/kernels/cuda"
)

// runtimeError marks a runtime that is missing, not bad input: exit status 3 (--device cuda on a
// machine without a CUDA driver).
type runtimeError struct{ err error }

func (e runtimeError) Error() string { return e.err.Error() }
func (e runtimeError) Unwrap() error { return e.err }

// runCUDA is --device cuda: it opens the CUDA driver and lists the devices. Without a driver it
// is cuda.ErrNoDriver ("no CUDA driver (libcuda.so.1 not found)"), one line and exit status 3.
// The GPU communicator (cuda.Comm, Ring and Tree, not run on a GPU yet) is not wired into collbench,
// so with a driver it says what it found and exits 3 too.
func runCUDA() error {
	drv, err := cuda.OpenDriver()
	if err != nil {
		return runtimeError{err}
	}
	devs, err := drv.Devices()
	if err != nil {
		return runtimeError{err}
	}
	if len(devs) == 0 {
		return runtimeError{errors.New("--device cuda: the CUDA driver sees no device")}
	}
	d := devs[0]
	return runtimeError{fmt.Errorf("--device cuda: driver %d.%d, %d device(s), 0: %s (%s, multicast %v); collbench does not drive the GPU communicator yet (issue 16, item 3)",
		drv.Version/1000, drv.Version%1000/10, len(devs), d.Name, d.Arch(), d.MulticastCapable)}
}
