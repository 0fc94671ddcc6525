//go:build linux

package launch

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// binder places rank processes on CPUs through the launcher's thread: a child inherits the
// affinity mask of the thread that starts it, so the launcher narrows its own (locked) thread's
// mask to one CPU before each start and restores it afterwards.
type binder struct {
	orig unix.CPUSet
	cpus []int // the CPUs the launcher's thread may run on, in increasing order
}

// bindSupported: Linux has sched_setaffinity.
const bindSupported = true

// newBinder reads the calling thread's affinity mask; the caller must hold its OS thread.
func newBinder() (*binder, error) {
	b := &binder{}
	if err := unix.SchedGetaffinity(0, &b.orig); err != nil {
		return nil, fmt.Errorf("engine: launch: reading the CPU affinity: %w", err)
	}
	for cpu := 0; cpu < len(b.orig)*64; cpu++ {
		if b.orig.IsSet(cpu) {
			b.cpus = append(b.cpus, cpu)
		}
	}
	return b, nil
}

// pin restricts the calling thread, and so the next child it starts, to cpu.
func (b *binder) pin(cpu int) error {
	var s unix.CPUSet
	s.Set(cpu)
	if err := unix.SchedSetaffinity(0, &s); err != nil {
		return fmt.Errorf("engine: launch: binding to cpu %d: %w", cpu, err)
	}
	return nil
}

// restore gives the calling thread its original mask back.
func (b *binder) restore() error {
	if err := unix.SchedSetaffinity(0, &b.orig); err != nil {
		return fmt.Errorf("engine: launch: restoring the CPU affinity: %w", err)
	}
	return nil
}
