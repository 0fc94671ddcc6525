package net

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/engine/internal/matrix"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

// The engine's correctness matrix (engine/internal/matrix: the same case generator, inputs,
// guarded buffers and oracle as engine's TestMatrix) across emulated hosts: 2 and 3 hosts, 1 and
// 2 ranks per host, Ring for all five collectives and Tree for AllReduce, LL, LL128 and Simple,
// the matrix's (dtype, op) values, sizes 0, 1, 13 and the wrapping size, in place or not, 1..3
// channels, aligned or not, three roots: a pairwise covering set over those axes and two products
// at the wrapping size (hostCases).

// hostSpace is the across-hosts matrix's axes: node counts 2 and 3 (Nodes: n is hosts x ranks
// per host), ranks per host 1 and 2; -short (the race run) takes the matrix's short (dtype, op) list.
func hostSpace(short bool) matrix.Space {
	return matrix.Space{CollAlgos: matrix.CollAlgos, Protos: matrix.Protos, DtOps: matrix.DtOps(short),
		Ns: []int{2, 3}, RPNs: []int{1, 2}, Nodes: true, Seed: 42}
}

// hostCases are the across-hosts matrix's cases: hostSpace's pairwise covering set, then (not
// short) two products at the wrapping size: the structural one as engine's TestCoreProduct makes
// it (every collective x algorithm, protocol, host count, ranks per host and in place or not,
// cycling through the (dtype, op) values, the channel counts, the alignments and the roots), and
// the (dtype, op) one on 2 hosts x 1 rank.
func hostCases(short bool) []matrix.Case {
	cases := hostSpace(short).Cases()
	if short {
		return cases
	}
	dos := matrix.DtOps(false)
	k := 0
	for _, ca := range matrix.CollAlgos {
		for _, proto := range matrix.Protos {
			for _, hosts := range []int{2, 3} {
				for _, per := range []int{1, 2} {
					for _, inPlace := range []bool{false, true} {
						cases = append(cases, matrix.Case{CA: ca, Proto: proto, Do: dos[k%len(dos)], N: hosts * per, RPN: per,
							Size: matrix.SizeWrap, InPlace: inPlace, Channels: 1 + k%3, Misalign: k % 2, RootSel: k % 3})
						k++
					}
				}
			}
		}
	}
	// And every (dtype, op) on every collective x algorithm and protocol at the wrapping size on 2
	// hosts x 1 rank (every element size and op across TCP with every protocol; the cheapest shape:
	// 666 cases in about 6 s), as engine's TestDtypeProduct makes it.
	k = 0
	for _, ca := range matrix.CollAlgos {
		for _, proto := range matrix.Protos {
			for _, do := range dos {
				cases = append(cases, matrix.Case{CA: ca, Proto: proto, Do: do, N: 2, RPN: 1, Size: matrix.SizeWrap,
					InPlace: k%2 == 1, Channels: 1 + k%3, Misalign: k / 2 % 2, RootSel: k % 3})
				k++
			}
		}
	}
	return cases
}

// matrixHost runs, on this host's ranks (comms, consecutive), every case of the across-hosts
// matrix whose shape is this job's (hosts x len(comms)), in the matrix's order, and prints one
// line per case and rank:
//
//	matrix K R ok DIGEST steps=S,...  rank R's result of case K is right (DIGEST: its bytes'
//	                                  FNV-64a; S: the FIFO steps each channel sent in the call)
//	matrix K R wrong MESSAGE     a check failed (one line per failure, at most 5)
//	matrix K R error MESSAGE     the call failed
//
// then "matrix done N" (N cases). It returns an error if any case was not right (after printing
// the Host's own error, naming the host it lost, if it has one).
func matrixHost(h *Host, comms []*engine.Comm, hosts int, buffers planner.Buffers, short bool) error {
	per := len(comms)
	first := comms[0].Rank()
	b := buffers.WithDefaults()
	// One write per line (os.Stdout is unbuffered), so that a line never interleaves with what
	// the process writes to stderr (the same pipe).
	out := os.Stdout
	ran, bad := 0, 0
	for k, m := range hostCases(short) {
		if m.N != hosts*per || m.RPN != per {
			continue
		}
		ran++
		for i, lines := range runHostCase(comms, m, matrix.Count(m, matrix.SlotPayload(b, m.Proto))) {
			for _, l := range lines {
				fmt.Fprintf(out, "matrix %d %d %s\n", k, first+i, l)
				if !strings.HasPrefix(l, "ok ") {
					bad++
				}
			}
		}
	}
	fmt.Fprintf(out, "matrix done %d\n", ran)
	// The ranks stay open until every host has run every case: the test closes every host's
	// standard input once all have said done. A host that closed its ranks and its Host while
	// another host's rank was still in the last call made that rank abort ("lost: the net
	// transport's link to its host failed"), though every byte it needed had come: a shutdown
	// race of the transport, not a wrong result, kept out of the matrix and reported.
	release := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(release) }()
	select {
	case <-release:
	case <-time.After(5 * time.Minute):
		fmt.Fprintln(out, "host error: not released within 5 minutes")
		bad++
	}
	if bad > 0 {
		if err := h.Err(); err != nil {
			fmt.Fprintf(out, "host error: %s\n", oneLine(err.Error()))
		}
		return fmt.Errorf("%d lines of the matrix not ok", bad)
	}
	return nil
}

// runHostCase runs case m on this host's ranks and returns each one's lines (after "matrix K R").
func runHostCase(comms []*engine.Comm, m matrix.Case, count int) [][]string {
	first := comms[0].Rank()
	local := func(r int) bool { return r >= first && r < first+len(comms) }
	dt, op, coll, root := m.Do.Dt, m.Do.Op, m.CA.Coll, m.Root()
	b := matrix.Place(m, count, func(r, inCount int) []byte { return matrix.Input(dt, op, matrix.Seed, r, inCount) }, local)
	// Every rank's PreMulSum scalar, for the oracle; this host's ranks' operators.
	var scalars [][]byte
	ops := make([]kernels.Op, len(comms))
	lines := make([][]string, len(comms))
	if m.Reduces() && op == kernels.PreMulSum {
		scalars = make([][]byte, m.N)
		for r := range scalars {
			scalars[r] = matrix.PremulScalar(dt, r)
		}
	}
	ov := engine.Pin(m.CA.Algo, m.Proto)
	ov.Channels = m.Channels
	for i, c := range comms {
		ops[i] = op
		if scalars != nil {
			var err error
			if ops[i], err = c.RedOpCreatePreMulSum(scalars[first+i], dt); err != nil {
				lines[i] = append(lines[i], "error "+oneLine(err.Error()))
			}
		}
		c.SetOverride(ov)
		c.ResetStats()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := first + i
			send, recv := b.Sends[r], b.Recvs[r]
			switch coll {
			case costmodel.AllReduce:
				errs[i] = c.AllReduce(ctx, send, recv, count, dt, ops[i])
			case costmodel.AllGather:
				errs[i] = c.AllGather(ctx, send, recv, count, dt)
			case costmodel.ReduceScatter:
				errs[i] = c.ReduceScatter(ctx, send, recv, count, dt, ops[i])
			case costmodel.Broadcast:
				errs[i] = c.Broadcast(ctx, send, recv, count, dt, root)
			default:
				errs[i] = c.Reduce(ctx, send, recv, count, dt, ops[i], root)
			}
		}()
	}
	wg.Wait()
	es := dt.Size()
	for i, c := range comms {
		r := first + i
		if scalars != nil {
			if err := c.RedOpDestroy(ops[i]); err != nil {
				lines[i] = append(lines[i], "error "+oneLine(err.Error()))
			}
		}
		if errs[i] != nil {
			lines[i] = append(lines[i], "error "+oneLine(errs[i].Error()))
			continue
		}
		fails := 0
		fail := func(format string, a ...any) {
			if fails < 5 {
				lines[i] = append(lines[i], "wrong "+oneLine(fmt.Sprintf(format, a...)))
			}
			fails++
		}
		matrix.CheckRank(fail, coll, dt, op, count, root, r, b.Ins, b.Recvs[r], scalars, nil)
		b.CheckRankUntouched(m, r, fail)
		if fails > 0 {
			continue
		}
		h := fnv.New64a()
		h.Write(b.Recvs[r][:b.OutCount*es])
		var steps []string
		for _, st := range c.Stats() {
			steps = append(steps, strconv.FormatUint(st.Steps, 10))
		}
		lines[i] = append(lines[i], fmt.Sprintf("ok %016x steps=%s", h.Sum64(), strings.Join(steps, ",")))
	}
	return lines
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " | ") }

// rankResult is what a host said about one rank of one case.
type rankResult struct {
	ok     bool
	digest string
	steps  []uint64
	msgs   []string
}

// parseMatrix reads the "matrix K R ..." lines of a host's output: results[K][R], and the number
// of cases the host said it ran (-1 without its "matrix done" line).
func parseMatrix(out string) (map[int]map[int]*rankResult, int, error) {
	results := map[int]map[int]*rankResult{}
	done := -1
	for _, l := range strings.Split(out, "\n") {
		f := strings.SplitN(l, " ", 5)
		if len(f) < 3 || f[0] != "matrix" {
			continue
		}
		if f[1] == "done" {
			n, err := strconv.Atoi(f[2])
			if err != nil {
				return nil, 0, fmt.Errorf("line %q: %w", l, err)
			}
			done = n
			continue
		}
		k, err1 := strconv.Atoi(f[1])
		r, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || len(f) < 4 {
			return nil, 0, fmt.Errorf("line %q: not matrix K R ...", l)
		}
		if results[k] == nil {
			results[k] = map[int]*rankResult{}
		}
		res := results[k][r]
		if res == nil {
			res = &rankResult{}
			results[k][r] = res
		}
		if f[3] != "ok" {
			res.msgs = append(res.msgs, strings.Join(f[3:], " "))
			continue
		}
		rest := strings.Fields(strings.Join(f[4:], " "))
		if len(rest) != 2 || !strings.HasPrefix(rest[1], "steps=") {
			return nil, 0, fmt.Errorf("line %q: not ok DIGEST steps=S,S,...", l)
		}
		res.ok, res.digest = true, rest[0]
		for _, s := range strings.Split(strings.TrimPrefix(rest[1], "steps="), ",") {
			if s == "" {
				continue
			}
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, 0, fmt.Errorf("line %q: steps: %w", l, err)
			}
			res.steps = append(res.steps, v)
		}
	}
	return results, done, nil
}

// TestMatrixAcrossHosts runs the engine's correctness matrix across emulated hosts (network
// namespaces on a bridge, one test-binary process per host, its ranks goroutines over an
// in-process local transport, the hosts over the net transport). Every host runs every case of
// its shape for its ranks and reports each rank's verdict (the oracle's, computed in the host
// process from every rank's inputs); here every case must be right on every rank, every AllReduce
// rank's result must be the same bytes, and at the wrapping size every channel a rank sent on
// must have sent at least 3 x NCCL_STEPS steps (its FIFO slots wrapped 3 times).
func TestMatrixAcrossHosts(t *testing.T) {
	requireNetns(t)
	short := testing.Short()
	cases := hostCases(short)
	start := time.Now()
	total := 0
	for _, hosts := range []int{2, 3} {
		t.Run(fmt.Sprintf("hosts=%d", hosts), func(t *testing.T) {
			lab := newLab(t, hosts)
			for _, per := range []int{1, 2} {
				t.Run(fmt.Sprintf("per=%d", per), func(t *testing.T) {
					t0 := time.Now()
					var mine []int
					for k, m := range cases {
						if m.N == hosts*per && m.RPN == per {
							mine = append(mine, k)
						}
					}
					require.NotEmpty(t, mine)
					total += len(mine)
					mode := "full"
					if short {
						mode = "short"
					}
					ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second)
					defer cancel()
					procs := startHosts(t, ctx, lab, per, false, "NETTEST_MATRIX="+mode)
					results := make([]map[int]map[int]*rankResult, hosts)
					releaseHosts(t, ctx, procs)
					for i, p := range procs {
						var err error
						select {
						case err = <-p.done:
						case <-ctx.Done():
							t.Fatalf("host %d still running after 300 s", i)
						}
						select {
						case <-p.eof:
						case <-time.After(10 * time.Second):
							t.Fatalf("host %d: output not closed 10 s after it exited", i)
						}
						if err != nil {
							t.Errorf("host %d: %v; its last lines:\n%s", i, err, lastLines(p.output(), 8))
						}
						var done int
						results[i], done, err = parseMatrix(p.output())
						require.NoError(t, err, "host %d", i)
						require.Equal(t, len(mine), done, "host %d ran %d of its %d cases: %s", i, done, len(mine), lastLines(p.output(), 20))
					}
					for _, k := range mine {
						m := cases[k]
						t.Run(m.String(), func(t *testing.T) {
							checkHostCase(t, k, m, per, results)
						})
					}
					t.Logf("%d cases on %d hosts x %d ranks in %v", len(mine), hosts, per, time.Since(t0))
				})
			}
		})
	}
	t.Logf("%d cases in %v", total, time.Since(start))
}

// releaseHosts waits until every host has said "matrix done" (or exited), then closes their
// standard inputs: only then do they close their ranks (see matrixHost).
func releaseHosts(t *testing.T, ctx context.Context, procs []*hostProc) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < len(procs); {
		select {
		case <-procs[i].eof:
			i++
			continue
		default:
		}
		if strings.Contains(procs[i].output(), "matrix done ") {
			i++
			continue
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Errorf("host %d did not finish its cases: %s", i, lastLines(procs[i].output(), 8))
			i = len(procs)
		}
	}
	for _, p := range procs {
		p.stdin.Close()
	}
}

// checkHostCase asserts case k's (m's) results: every rank's verdict ok, the AllReduce results
// equal, and at the wrapping size the steps.
func checkHostCase(t *testing.T, k int, m matrix.Case, per int, results []map[int]map[int]*rankResult) {
	digest := ""
	sent := false
	for r := 0; r < m.N; r++ {
		host := r / per
		res := results[host][k][r]
		if !assert.NotNil(t, res, "rank %d (host %d) reported nothing", r, host) {
			continue
		}
		assert.Empty(t, res.msgs, "rank %d (host %d)", r, host)
		if !res.ok {
			continue
		}
		if m.CA.Coll == costmodel.AllReduce {
			if digest == "" {
				digest = res.digest
			}
			assert.Equal(t, digest, res.digest, "rank %d's AllReduce result differs from rank 0's", r)
		}
		if m.Size == matrix.SizeWrap {
			for ch, s := range res.steps {
				if s > 0 {
					sent = true
					assert.GreaterOrEqual(t, s, uint64(3*wire.NCCLSteps), "rank %d channel %d sent %d steps", r, ch, s)
				}
			}
		}
	}
	if m.Size == matrix.SizeWrap {
		assert.True(t, sent, "no rank sent a step")
	}
}

// lastLines is the last n lines of out.
func lastLines(out string, n int) string {
	l := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// TestCleanCloseWhileOthersFinish: 3
// loopback hosts x 2 ranks run one Ring Simple Reduce to root 3 (ranks 4 and 5, on host 2, send
// first and return first); host 2 closes its ranks and then its Host as soon as they return,
// while ranks 0..3 are still in the call. Nothing they need is missing (host 2's proxy sends what
// its senders completed before it says goodbye), so every rank must return nil. Before writeFailed, host 0's
// poller keeps writing to host 2's link after the goodbye (the heads of connection 5->0), the write
// fails ("write: broken pipe"), and host 0 aborted the communicator as if host 2 were lost (14 of 40 iterations): ranks
// 2 and 3 (often) return "rank 4: lost". The matrix across hosts found it in its last case
// (Reduce-RING-SIMPLE-float32-premulsum-n6-rpn2-size3-ch3-inplace-misaligned-root3, rank 3 on host
// 1, about 1 run in 10 under -race) and now keeps its hosts open until all are done.
func TestCleanCloseWhileOthersFinish(t *testing.T) {
	const iters, count = 40, 6000
	bad := 0
	for it := 0; it < iters; it++ {
		j := startJob(t, 3, 2, engine.Config{Timeout: 10 * time.Second})
		errs := make([]error, 6)
		var all, host2 sync.WaitGroup
		host2.Add(2)
		closed := make(chan struct{})
		go func() { host2.Wait(); j.hosts[2].Close(); close(closed) }()
		for r := range j.comms {
			all.Add(1)
			go func() {
				defer all.Done()
				c := j.comms[r]
				o := engine.Pin(costmodel.Ring, costmodel.Simple)
				o.Channels = 3
				c.SetOverride(o)
				errs[r] = c.Reduce(context.Background(), i32(inputs(r, count)), make([]byte, 4*count), count, kernels.Int32, kernels.Sum, 3)
				if r >= 4 {
					c.Close()
					host2.Done()
				}
			}()
		}
		finished := make(chan struct{})
		go func() { all.Wait(); close(finished) }()
		select {
		case <-finished:
		case <-time.After(30 * time.Second):
			t.Fatalf("iteration %d: ranks still running after 30 s", it)
		}
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("iteration %d: host 2 not closed after 10 s", it)
		}
		for r, err := range errs {
			if !assert.NoError(t, err, "iteration %d rank %d (host 0: %v)", it, r, j.hosts[0].Err()) {
				bad++
			}
		}
		j.close()
	}
	assert.Zero(t, bad, "rank errors in %d iterations", iters)
}
