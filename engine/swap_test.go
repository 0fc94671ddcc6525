package engine

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

// TestSwapTables: a swap at the agreed call changes the plan from that call on, on every rank; a
// swap at another call is refused and changes nothing.
func TestSwapTables(t *testing.T) {
	const n = 2
	comms, err := NewInProcess(n, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	all := func(f func(c *Comm) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r, c := range comms {
			wg.Add(1)
			go func() { defer wg.Done(); errs[r] = f(c) }()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	buf := func() []byte { return make([]byte, 4*1024) }
	call := func(c *Comm) error {
		b := buf()
		return c.AllReduce(context.Background(), b, b, 1024, kernels.Float32, kernels.Sum)
	}
	all(call)
	if p := comms[0].LastPlan(); p.Algo != costmodel.Ring || p.Proto != costmodel.Simple {
		t.Fatalf("default plan %v/%v", p.Algo, p.Proto)
	}
	if got := comms[0].Seq(); got != 1 {
		t.Fatalf("Seq after one call = %d", got)
	}
	if err := comms[0].SwapTables(5, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("swap at a later call: %v", err)
	}
	dt := cpuTableAt(t, costmodel.AllReduce, false) // Ring and Tree only: the 4-node table on a 2-rank node
	want := dt.Lookup(4 * 1024)
	all(func(c *Comm) error { return c.SwapTables(c.Seq()+1, []*planner.DecisionTable{dt}) })
	all(call)
	for r, c := range comms {
		if p := c.LastPlan(); p.Algo != want.Algo || p.Proto != want.Proto || p.Channels != want.Channels {
			t.Fatalf("rank %d after the swap ran %v/%v/%d, want the table's %v/%v/%d", r, p.Algo, p.Proto, p.Channels, want.Algo, want.Proto, want.Channels)
		}
	}
	all(func(c *Comm) error { return c.SwapTables(c.Seq()+1, nil) })
	all(call)
	if p := comms[0].LastPlan(); p.Algo != costmodel.Ring || p.Proto != costmodel.Simple || p.Channels != 2 {
		t.Fatalf("after swapping the tables out: %v/%v/%d", p.Algo, p.Proto, p.Channels)
	}
	if got := comms[1].Seq(); got != 3 {
		t.Fatalf("Seq = %d", got)
	}
}
