//go:build unix

package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/engine/transport/collnet"
	"github.com/collplan/collplan/engine/transport/shm"
)

// Launcher starts the n ranks of a job as local processes (like mpirun -np n on one host) and
// watches them: when a rank exits with an error or dies, it aborts the communicator on that rank's
// behalf (AbortShm), so that every other rank's waits fail, and kills the ranks still running
// after Grace. At the end it removes the job's shared-memory segments. On Linux a launcher that
// dies takes its ranks with it (SIGKILL to each, rankProcAttr); the segments it leaves are removed
// as stale by the next launch.
//
// When it starts more ranks than there are cores (its CollNet endpoint counting as one) it sets
// GOMAXPROCS=1 in the ranks' environment
// (unless the environment sets GOMAXPROCS): the ranks then share the cores by the kernel's
// scheduling of their one running thread each, instead of every rank's idle Ps and spinning
// threads competing for them (measured on 2 cores, 4 ranks, 8 B to 1 MiB all-reduce: see
// rankEnv).
//
// Then it also binds rank r to the (r mod c)-th of the c CPUs it may run on (mpirun's
// --map-by core --bind-to core), unless Bind is BindNone, and tells the ranks in COLLPLAN_BIND
// (the CPU list; absent when it did not bind). Bound, the two ranks sharing a core stay
// together instead of being moved by the kernel's load balancing, and every ring or chain
// neighbour of a rank runs on another core. Measured on 2 cores, 4 ranks, LL all-reduce of 8-512
// B: 3.39-7.03 us per call bound, 4.12-7.25 unbound with the same waits (median of 84 values,
// alternated; docs/engine-vs-mpi.md, sixth run); at 2-128 MiB within 3 %. When every rank has a
// core the launcher does not bind: a bound 2-rank job took 0.68 against 0.52 us at 8 B (its idle
// Ps then compete with the rank for its one CPU).
type Launcher struct {
	N      int
	Argv   []string  // program and arguments, the same for every rank
	Env    []string  // environment of every rank (os.Environ() when nil), before the rank variables
	Stdout io.Writer // every rank's standard output and error (os.Stdout, os.Stderr when nil)
	Stderr io.Writer
	Grace  time.Duration // how long ranks may run on after a failure or cancellation; 0 means 5 s
	// Job is the job id handed to the ranks (COLLPLAN_JOB); "" makes one owned by this process.
	Job string
	// Bind is how the ranks are placed on CPUs; the zero value binds when they outnumber them.
	Bind Binding
	// CollNet, when set, is the command of the job's CollNet aggregation endpoint (for collbench,
	// itself with --serve-collnet); the launcher appends a free loopback address to it, starts it
	// before the ranks, waits until it accepts connections, gives the ranks its address in
	// COLLPLAN_COLLNET_ADDR (CollNetEnv), treats its death before the ranks' end like a rank's
	// (every rank's communicator is aborted), and stops it at the end.
	CollNet []string
}

// Binding is a Launcher's placement of ranks on CPUs.
type Binding int

const (
	// BindAuto binds rank r to the (r mod c)-th of the launcher's c CPUs when the ranks
	// outnumber them (Linux only), and leaves placement to the kernel otherwise.
	BindAuto Binding = iota
	// BindNone never binds.
	BindNone
)

// EnvBind is the variable in which a launcher that bound its ranks lists the CPUs, rank r
// being on the (r mod len)-th.
const EnvBind = "COLLPLAN_BIND"

// LaunchError names the rank whose failure ended the job: the first rank that exited with an
// error (Rank, Err; Rank -1 when the job's CollNet aggregation endpoint exited first) and, when the communicator's abort named another rank as gone or stalled
// before that (Culprit, Cause), that rank.
type LaunchError struct {
	Rank int
	Err  error

	Culprit int   // the rank the abort names; meaningful when Cause is set
	Cause   error // the abort that named Culprit, nil when Rank is the one at fault
}

func (e *LaunchError) Error() string {
	if e.Rank < 0 {
		return fmt.Sprintf("engine: launch: %v", e.Err) // not a rank: the CollNet endpoint
	}
	if e.Cause != nil {
		return fmt.Sprintf("engine: launch: rank %d: %v (rank %d exited first: %v)", e.Culprit, e.Cause, e.Rank, e.Err)
	}
	return fmt.Sprintf("engine: launch: rank %d: %v", e.Rank, e.Err)
}
func (e *LaunchError) Unwrap() error { return e.Err }

// Launch runs argv as n local ranks with env (see Launcher).
func Launch(ctx context.Context, n int, argv, env []string) error {
	return (&Launcher{N: n, Argv: argv, Env: env}).Run(ctx)
}

// rankEnv is the environment of n rank processes on ncpu cores: env, plus GOMAXPROCS=1 when the
// ranks outnumber the cores and env does not set GOMAXPROCS. A rank's runtime otherwise gets one P
// per core; its waiters then spin and yield on several threads while other ranks' processes,
// which they wait for, have no core. (Measured with collbench on 2 cores, 4 rank processes, Ring
// all-reduce: see the change's report for the numbers.)
func rankEnv(env []string, n, ncpu int) []string {
	if n <= ncpu {
		return env
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "GOMAXPROCS=") {
			return env
		}
	}
	return append(append([]string(nil), env...), "GOMAXPROCS=1")
}

// Run starts the ranks, waits for all of them and returns the first failure as a *LaunchError.
// When ctx is done the ranks get SIGINT (a request to stop), then SIGKILL after Grace; ranks that
// stop cleanly on the request are not a failure.
func (l *Launcher) Run(ctx context.Context) (err error) {
	if l.N < 1 || len(l.Argv) == 0 {
		return fmt.Errorf("%w: launch of %d ranks of %q", wire.ErrInvalid, l.N, l.Argv)
	}
	grace := l.Grace
	if grace == 0 {
		grace = 5 * time.Second
	}
	stdout, stderr := l.Stdout, l.Stderr
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	env := l.Env
	if env == nil {
		env = os.Environ()
	}
	if env, err = shm.ShmDirEnv(env); err != nil {
		return err
	}
	if _, err := shm.RemoveStaleShm(); err != nil {
		fmt.Fprintf(stderr, "collplan: warning: %v\n", err)
	}
	job := l.Job
	if job == "" {
		job = transport.NewJobID(os.Getpid())
	}
	// The job's lock exists before any rank can look for it; whoever lets go of the job last (this
	// launcher, once every rank has exited) removes the job's files.
	lock, err := shm.CreateJobLock(job)
	if err != nil {
		return err
	}
	defer func() {
		if rerr := lock.Close(); rerr != nil && err == nil {
			err = rerr
		}
	}()
	addr, err := FreeLoopbackAddr()
	if err != nil {
		return err
	}
	// Serialize the ranks' writes so that lines do not interleave mid-write.
	var outMu sync.Mutex
	out := &lockedWriter{w: stdout, mu: &outMu}
	errw := &lockedWriter{w: stderr, mu: &outMu}

	// The ranks' parent-death signal and CPU binding follow the thread that starts them
	// (rankProcAttr, binder): keep it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b, err := newBinder()
	if err != nil {
		return err
	}
	procs := l.N
	if len(l.CollNet) > 0 {
		procs++ // the endpoint needs a core too
	}
	env = rankEnv(env, procs, len(b.cpus))
	bind := bindSupported && l.Bind == BindAuto && l.N > len(b.cpus)
	if bind {
		list := make([]string, len(b.cpus))
		for i, cpu := range b.cpus {
			list[i] = strconv.Itoa(cpu)
		}
		env = append(env, EnvBind+"="+strings.Join(list, ","))
	}
	var ep *exec.Cmd
	epExit := make(chan error, 1)
	if len(l.CollNet) > 0 {
		var epAddr string
		if ep, epAddr, err = startCollNet(l.CollNet, out, errw); err != nil {
			b.restore()
			return err
		}
		go func() { epExit <- ep.Wait() }()
		defer stopCollNet(ep, epExit)
		env = append(env, collnet.CollNetEnv+"="+epAddr)
	}
	cmds, err := l.start(ctx, b, bind, env, addr, job, out, errw)
	if rerr := b.restore(); err == nil && rerr != nil {
		killAll(cmds)
		return rerr
	}
	if err != nil {
		return err
	}

	type exit struct {
		rank int
		err  error
	}
	exits := make(chan exit, l.N)
	for r, cmd := range cmds {
		go func() { exits <- exit{r, cmd.Wait()} }()
	}
	running := l.N
	alive := make([]bool, l.N)
	for r := range alive {
		alive[r] = true
	}
	var first *LaunchError
	var killTimer <-chan time.Time
	startGrace := func() {
		if killTimer == nil {
			killTimer = time.After(grace)
		}
	}
	ctxDone := ctx.Done()
	for running > 0 {
		select {
		case e := <-exits:
			running--
			alive[e.rank] = false
			if e.err != nil && first == nil && epExit != nil {
				// A rank whose endpoint connection failed may exit before the launcher reaps the
				// endpoint it saw die: wait for that (bounded) so the endpoint is named, not the rank.
				if w, _ := shm.AbortWordShm(job); int(w&0xff) == wire.AbortCollNet {
					select {
					case ee := <-epExit:
						epExit <- ee // for stopCollNet
						epExit = nil
						first = &LaunchError{Rank: -1, Err: fmt.Errorf("the CollNet aggregation endpoint exited: %v", ee)}
						startGrace()
						continue
					case <-time.After(time.Second):
					}
				}
			}
			if e.err != nil && first == nil {
				first = &LaunchError{Rank: e.rank, Err: e.err}
				// The communicator may have been aborted already, naming the rank at fault (a
				// stopped rank named by the watchdog, while the rank that exited first is one it
				// stalled): then that is the rank to name.
				if w, _ := shm.AbortWordShm(job); w != 0 && wire.AbortNames(w) && int(w>>8)-1 != e.rank {
					first.Culprit, first.Cause = int(w>>8)-1, wire.AbortErr(w)
					// A rank the watchdog found stalled is not coming back (it may be stopped):
					// end it now rather than after the grace. (A lost one, whose connection was
					// cut, sees the abort and exits by itself.)
					if c := first.Culprit; int(w&0xff) == wire.AbortStalled && c >= 0 && c < len(cmds) && alive[c] {
						cmds[c].Process.Kill()
					}
				} else if _, aerr := shm.AbortShmFor(job, e.rank, wire.AbortExited); aerr != nil {
					fmt.Fprintf(errw, "collplan: aborting job %s for rank %d: %v\n", job, e.rank, aerr)
				}
				startGrace()
			}
		case <-ctxDone:
			ctxDone = nil
			for r, cmd := range cmds {
				if alive[r] {
					cmd.Process.Signal(syscall.SIGINT)
				}
			}
			startGrace()
		case <-killTimer:
			for r, cmd := range cmds {
				if alive[r] {
					cmd.Process.Kill()
				}
			}
		case e := <-epExit:
			// The aggregation endpoint died under the ranks: abort the job as for a rank (the
			// ranks whose connections ended abort by themselves too).
			epExit <- e // for stopCollNet
			epExit = nil
			if first == nil {
				first = &LaunchError{Rank: -1, Err: fmt.Errorf("the CollNet aggregation endpoint exited: %v", e)}
				if _, aerr := shm.AbortShmFor(job, -1, wire.AbortEndpoint); aerr != nil {
					fmt.Fprintf(errw, "collplan: aborting job %s for its CollNet endpoint: %v\n", job, aerr)
				}
				startGrace()
			}
		}
	}
	if first != nil {
		return first
	}
	return nil // every rank exited cleanly, stopped by ctx or not
}

// start starts the ranks from the calling (locked) thread, rank r bound to b.cpus[r mod len] when
// bind is set. It checks ctx before each start (a stop request while hundreds of ranks start is
// served at once). On failure or cancellation it kills and reaps the ranks already started.
func (l *Launcher) start(ctx context.Context, b *binder, bind bool, env []string, addr, job string, out, errw io.Writer) ([]*exec.Cmd, error) {
	cmds := make([]*exec.Cmd, 0, l.N)
	fail := func(r int, err error) ([]*exec.Cmd, error) {
		killAll(cmds)
		return nil, &LaunchError{Rank: r, Err: err}
	}
	for r := range l.N {
		if err := ctx.Err(); err != nil {
			killAll(cmds)
			return nil, fmt.Errorf("engine: launch: stopped after starting %d of %d ranks: %w", r, l.N, err)
		}
		if bind {
			if err := b.pin(b.cpus[r%len(b.cpus)]); err != nil {
				return fail(r, err)
			}
		}
		cmd := exec.Command(l.Argv[0], l.Argv[1:]...)
		cmd.Env = append(append([]string(nil), env...),
			"COLLPLAN_RANK="+strconv.Itoa(r), "COLLPLAN_WORLD_SIZE="+strconv.Itoa(l.N),
			"COLLPLAN_ADDR="+addr, "COLLPLAN_JOB="+job)
		cmd.Stdout, cmd.Stderr = out, errw
		cmd.SysProcAttr = rankProcAttr()
		if err := cmd.Start(); err != nil {
			return fail(r, fmt.Errorf("starting %s: %w", l.Argv[0], err))
		}
		cmds = append(cmds, cmd)
	}
	return cmds, nil
}

// startCollNet starts the aggregation endpoint argv with a free loopback address appended and
// waits (up to collnet.IOTimeout) until it accepts connections.
func startCollNet(argv []string, out, errw io.Writer) (*exec.Cmd, string, error) {
	addr, err := FreeLoopbackAddr()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(argv[0], append(argv[1:len(argv):len(argv)], addr)...)
	cmd.Stdout, cmd.Stderr = out, errw
	cmd.SysProcAttr = rankProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("engine: launch: starting the CollNet endpoint %s: %w", argv[0], err)
	}
	deadline := time.Now().Add(collnet.IOTimeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return cmd, addr, nil
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, "", fmt.Errorf("engine: launch: the CollNet endpoint %s did not listen on %s within %v: %w", argv[0], addr, collnet.IOTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopCollNet stops the endpoint: SIGTERM, then SIGKILL after a second; it reaps it.
func stopCollNet(cmd *exec.Cmd, exited chan error) {
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(time.Second):
		cmd.Process.Kill()
		<-exited
	}
}

// killAll kills and reaps started ranks.
func killAll(cmds []*exec.Cmd) {
	for _, c := range cmds {
		c.Process.Kill()
		c.Wait()
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// IsLaunchError reports whether err comes from a rank of a launched job, and which rank is at
// fault.
func IsLaunchError(err error) (int, bool) {
	var le *LaunchError
	if errors.As(err, &le) {
		if le.Cause != nil {
			return le.Culprit, true
		}
		return le.Rank, true
	}
	return -1, false
}
