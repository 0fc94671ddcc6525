// Command collbench runs the engine's collectives with nccl-tests' interface and prints
// nccl-tests' table, so that calibrate.ParseSweep reads its output like an nccl-tests sweep.
//
//	collbench allreduce|allgather|reducescatter|broadcast|reduce [-b 8] [-e 128M] [-f 2] [-n 20]
//	    [-w 5] [-c 1] [-o sum|prod|max|min|avg|mulsum|all] [-d float|...|all] [-S 1] [-C 1] [-np 4]
//	    [--ranks-per-node 2] [--transport shm|inproc] [--bind-to auto|none] [--algo Ring] [--proto LL128]
//
// -o all and -d all run every op (mulsum included) for every type, in nccl-tests' order, under the
// one header; mulsum is a PreMulSum operator with nccl-tests' per-rank scalar (1 on even ranks, 2
// on odd ones). -S 1 adds the timestamp column (date and time at the end of each row), -C 1 reports
// CPU time (getrusage; an equal share of the process's per rank in process) as cputime columns.
//
// With --transport shm (the default) the ranks are processes: collbench starts -np copies of
// itself (or runs as one rank when COLLPLAN_RANK/OMPI_COMM_WORLD_RANK/PMI_RANK/RANK is set) that
// meet over a loopback TCP rendezvous and share memory through /dev/shm (or COLLPLAN_SHM_DIR).
// With inproc the ranks are goroutines of one process.
//
// --device cpu (the default) runs the engine on CPUs; --device cuda opens the CUDA driver at run
// time and runs the sweep on the GPU communicator (kernels/cuda.Comm, the ranks sharing device 0,
// Ring/Simple unless pinned; device.go) or, without a driver, prints "no CUDA driver
// (libcuda.so.1 not found)" and exits with status 3: a missing runtime, not bad input.
//
// The flags are checked once, before any rank starts (exit status 2 and one line for bad input;
// -h prints them): -np above the host's limit (--max-np raises it), buffers that cannot fit in
// the available memory, an unknown pin or tuner. The rendezvous connections stay open for the
// job's life, so a rank whose process dies aborts the job on every rank, with or without the
// launcher; --timeout (10 minutes; 0 turns it off) is the watchdog that names a rank that stopped
// moving data. The first SIGINT or SIGTERM stops the sweep at the next size; a collective still
// blocked 2 s later (hardGrace), or at a second signal, is aborted and the rank cleans up and
// exits; a third signal ends the process.
//
// CollNet: --algo CollNetDirect or CollNetChain (AllReduce, Simple, 2 or more virtual nodes) reduces
// across the nodes in a CollNet aggregation endpoint: the launcher starts one for the job (this
// program with --serve-collnet and a free loopback address) and gives the ranks its address in
// COLLPLAN_COLLNET_ADDR; --transport inproc runs one in the process; ranks started by hand need
// COLLPLAN_COLLNET_ADDR, naming one started with collbench --serve-collnet ADDR, which serves until
// SIGINT or SIGTERM.
//
// Policies: the planner's DecisionTable can come through a tuner plugin (--tuner NAME|PATH
// [--tuner-config FILE] [--tuner-timeout D] [--tuner-sha256 HEX]); every rank compiles it and the
// rendezvous checks that the tables agree (a failing tuner falls back to the built-in policy on
// every rank, and the plans line says so). SIGHUP (to the launcher, which passes it on to rank 0)
// recompiles the table, re-reading --tuner-config; rank 0 announces the table hash and the sequence
// number of the first call to run it, every rank compiles and checks it, and all switch at that
// call (a log line per rank on stderr names it); a table that does not compile leaves the old one.
// --ab A,B [--ab-config-a FILE] [--ab-config-b FILE] [--ab-runs 15] [--ab-seed 1] times two
// policies interleaved run by run on one communicator and prints per size both medians and a
// bootstrap 95% confidence interval of their difference, with a verdict.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first SIGINT/SIGTERM stops the run at the next size (-N 0 runs until then); a call
		// still blocked hardGrace later is aborted (callContext), and the rank cleans up and exits.
		// Copies arriving within a second (ctrl-C reaches the ranks both from the terminal and
		// from the launcher) are absorbed; a later one aborts at once, and the one after that
		// ends the process.
		<-sigs
		first := time.Now()
		cancel()
		later := 0
		for s := range sigs {
			if time.Since(first) <= time.Second {
				continue
			}
			if later++; later == 1 {
				abortCalls()
				continue
			}
			signal.Stop(sigs)
			syscall.Kill(os.Getpid(), s.(syscall.Signal))
		}
	}()
	notifyHups()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	code := exitCode(err)
	if code != 0 {
		fmt.Fprintln(os.Stderr, "collbench:", err)
	}
	os.Exit(code)
}

// exitCode is the exit status for run's error: 0 (none, or -h), 2 bad input (usageError), 3 a
// missing runtime (runtimeError: --device cuda without a CUDA driver), 1 anything else.
func exitCode(err error) int {
	var ue usageError
	var re runtimeError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		return 2
	case errors.As(err, &re):
		return 3
	}
	return 1
}

// usageError marks bad input (flags, the environment's rank variables, a size that cannot fit):
// exit status 2, before any rank starts.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// errHelp: -h was asked for and the usage printed; exit status 0.
var errHelp = errors.New("help requested")

// hardGrace is how long after a stop request a collective may stay blocked (a dead or stopped
// peer) before this rank aborts it, so that every rank cleans up and exits before a launcher's
// grace (5 s) ends in SIGKILL.
const hardGrace = 2 * time.Second

// hardStop is closed by a second stop signal: calls abort at once.
var (
	hardStop     = make(chan struct{})
	hardStopOnce sync.Once
)

func abortCalls() { hardStopOnce.Do(func() { close(hardStop) }) }

// callContext is the context of the collectives: a stop request (ctx) ends the sweep between sizes,
// agreed by every rank, so calls are not cancelled by it; but a call still running hardGrace after
// it, or after a second signal, is aborted (a peer that died or stopped would otherwise keep this
// rank waiting for the watchdog).
func callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-ctx.Done():
		case <-hardStop:
			cancel()
			return
		case <-cctx.Done():
			return
		}
		t := time.NewTimer(hardGrace)
		defer t.Stop()
		select {
		case <-t.C:
		case <-hardStop:
		case <-cctx.Done():
		}
		cancel()
	}()
	return cctx, cancel
}

// notifyHups counts SIGHUPs (a policy reload: see reloadWatch) instead of letting them end the
// process.
func notifyHups() {
	hupc := make(chan os.Signal, 4)
	signal.Notify(hupc, syscall.SIGHUP)
	go func() {
		for range hupc {
			hups.Add(1)
		}
	}()
}
