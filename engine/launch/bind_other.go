//go:build unix && !linux

package launch

import "runtime"

// binder: without a portable affinity call the launcher leaves placement to the kernel; cpus is
// only the count that decides GOMAXPROCS (rankEnv).
type binder struct{ cpus []int }

func newBinder() (*binder, error) {
	b := &binder{}
	for cpu := range runtime.NumCPU() {
		b.cpus = append(b.cpus, cpu)
	}
	return b, nil
}

// bindSupported: no affinity call here.
const bindSupported = false

func (b *binder) pin(int) error  { return nil }
func (b *binder) restore() error { return nil }
