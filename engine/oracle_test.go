package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/matrix"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

// The oracle is the matrix package's (engine/internal/matrix): expected results computed from the
// inputs alone, never from another engine run. These are its names in the engine's tests.

// fillInput writes count elements of rank's input, element index base+i at position i.
func fillInput(b []byte, dt kernels.Dtype, op kernels.Op, seed uint64, rank, base, count int) {
	matrix.FillInput(b, dt, op, seed, rank, base, count)
}

// premulScalar is rank r's PreMulSum scalar.
func premulScalar(dt kernels.Dtype, r int) []byte { return matrix.PremulScalar(dt, r) }

// elemWant is the oracle's verdict on one result element.
type elemWant = matrix.Want

// expectElem is the oracle over the contributions in[r][off:].
func expectElem(dt kernels.Dtype, op kernels.Op, ins [][]byte, off int, scalars [][]byte) elemWant {
	return matrix.Expect(dt, op, ins, off, scalars)
}

// checkElem compares one result element with the oracle over the contributions in[r][off:].
func checkElem(dt kernels.Dtype, op kernels.Op, got []byte, ins [][]byte, off int, scalars [][]byte) error {
	return matrix.CheckElem(dt, op, got, ins, off, scalars)
}

// runRanks calls fn for every rank, each on its own goroutine, and returns their errors. If the
// ranks do not finish within limit, the test fails and every rank is closed (which aborts the
// communicator and ends every wait), so no goroutine outlives the test.
func runRanks(t testing.TB, comms []*Comm, limit time.Duration, fn func(r int, c *Comm) error) []error {
	t.Helper()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r, c)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Errorf("ranks did not finish within %v: closing them", limit)
		for _, c := range comms {
			c.Close()
		}
		<-done
	}
	return errs
}

func closeAll(comms []*Comm) {
	for _, c := range comms {
		c.Close()
	}
}

// tinyBuffers make every FIFO slot small: LL 2 lines (16 payload bytes), LL128 one line (120),
// Simple 64 bytes.
func tinyBuffers() planner.Buffers { return matrix.TinyBuffers() }

var bg = context.Background()

// protos and algos for table tests.
var protos = matrix.Protos

// checkResults is matrix.CheckResults: every rank's output of one call of coll checked against the
// inputs ins by the oracle, every AllReduce rank's result equal to rank 0's (with every false, ranks
// after 0 of an AllReduce by that equality alone); expect, when set, caches the oracle's verdicts.
func checkResults(fail func(string, ...any), coll costmodel.Coll, dt kernels.Dtype, op kernels.Op,
	count, es, root int, ins, recvs [][]byte, scalars [][]byte, every bool, expect func(off int) elemWant) {
	matrix.CheckResults(fail, coll, dt, op, count, root, ins, recvs, scalars, every, expect)
}
