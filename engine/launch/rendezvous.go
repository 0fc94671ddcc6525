package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport"
)

// Env describes a rank of a multi-process job as its environment gives it.
type Env struct {
	Rank, Size int
	Addr       string // rendezvous address, host:port on loopback
	Job        string // job id handed down by a launcher (COLLPLAN_JOB), "" otherwise
	Source     string // which variables gave rank and size
}

// DefaultRendezvousPort is the port used when the environment names an address without one.
const DefaultRendezvousPort = 29517

// EnvFrom reads the rank, size and rendezvous address of this process from getenv: COLLPLAN_RANK,
// COLLPLAN_WORLD_SIZE, COLLPLAN_ADDR (and COLLPLAN_JOB); else OMPI_COMM_WORLD_RANK/_SIZE; else
// PMI_RANK/PMI_SIZE; else RANK/WORLD_SIZE. The address is COLLPLAN_ADDR, else
// MASTER_ADDR:MASTER_PORT, else 127.0.0.1:DefaultRendezvousPort. ok is false when no variable
// names a rank.
func EnvFrom(getenv func(string) string) (e Env, ok bool, err error) {
	for _, p := range [][3]string{
		{"COLLPLAN_RANK", "COLLPLAN_WORLD_SIZE", "COLLPLAN"},
		{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI"},
		{"PMI_RANK", "PMI_SIZE", "PMI"},
		{"RANK", "WORLD_SIZE", "torch"},
	} {
		rs, ss := getenv(p[0]), getenv(p[1])
		if rs == "" {
			continue
		}
		e.Source = p[2]
		if e.Rank, err = strconv.Atoi(rs); err != nil {
			return e, false, fmt.Errorf("%w: %s=%q", wire.ErrInvalid, p[0], rs)
		}
		if e.Size, err = strconv.Atoi(ss); err != nil {
			return e, false, fmt.Errorf("%w: %s=%q with %s set", wire.ErrInvalid, p[1], ss, p[0])
		}
		if e.Size < 1 || e.Rank < 0 || e.Rank >= e.Size {
			return e, false, fmt.Errorf("%w: rank %d of %d from %s/%s", wire.ErrInvalid, e.Rank, e.Size, p[0], p[1])
		}
		ok = true
		break
	}
	if !ok {
		return e, false, nil
	}
	e.Job = getenv("COLLPLAN_JOB")
	switch {
	case getenv("COLLPLAN_ADDR") != "":
		e.Addr = getenv("COLLPLAN_ADDR")
	case getenv("MASTER_ADDR") != "":
		port := getenv("MASTER_PORT")
		if port == "" {
			port = strconv.Itoa(DefaultRendezvousPort)
		}
		e.Addr = net.JoinHostPort(getenv("MASTER_ADDR"), port)
	default:
		e.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(DefaultRendezvousPort))
	}
	host, _, err := net.SplitHostPort(e.Addr)
	if err != nil {
		return e, false, fmt.Errorf("%w: rendezvous address %q: %v", wire.ErrInvalid, e.Addr, err)
	}
	if host == "localhost" {
		e.Addr = strings.Replace(e.Addr, "localhost", "127.0.0.1", 1)
	} else if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return e, false, fmt.Errorf("%w: rendezvous address %q: only loopback (127.0.0.1) is supported", wire.ErrInvalid, e.Addr)
	}
	return e, true, nil
}

// RendezvousError is a refusal to start: a rank's configuration hash, size or rank differs.
type RendezvousError struct{ Msg string }

func (e *RendezvousError) Error() string { return "engine: rendezvous: " + e.Msg }

// Is makes errors.Is(err, ErrConfig) true.
func (e *RendezvousError) Is(target error) bool { return target == wire.ErrConfig }

// Connect brings the ranks of a job together over TCP on loopback: rank 0 listens on addr, the
// others connect (retrying until the deadline) and send their rank, size and configuration hash;
// rank 0 checks every rank's against its own and hands out the job id (job, or a fresh one owned
// by this process when job is ""), or refuses every rank with the same error naming the first
// difference. Every rank returns the job id and its connections, by peer rank (rank 0 one to
// every other rank, every other rank one to rank 0; nil elsewhere), or an error; none waits past
// timeout. The engine's Join keeps them as the communicator's Session.
func Connect(ctx context.Context, rank, size int, addr string, cfgHash uint64, job string, timeout time.Duration) (string, []net.Conn, error) {
	if size < 1 || rank < 0 || rank >= size {
		return "", nil, fmt.Errorf("%w: rank %d of %d", wire.ErrInvalid, rank, size)
	}
	if job != "" {
		if err := transport.ValidJobID(job); err != nil {
			return "", nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if size == 1 {
		if job == "" {
			job = transport.NewJobID(os.Getpid())
		}
		return job, nil, nil
	}
	if rank == 0 {
		return rendezvousRoot(ctx, size, addr, cfgHash, job)
	}
	job, c, err := rendezvousPeer(ctx, rank, size, addr, cfgHash)
	if err != nil {
		return "", nil, err
	}
	conns := make([]net.Conn, size)
	conns[0] = c
	return job, conns, nil
}

func rendezvousRoot(ctx context.Context, size int, addr string, cfgHash uint64, job string) (string, []net.Conn, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("engine: rendezvous: rank 0 listening on %s: %w", addr, err)
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	if job == "" {
		job = transport.NewJobID(os.Getpid())
	}
	conns := make([]net.Conn, size)
	keep := false
	defer func() {
		if keep {
			return
		}
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	var refusal string
	joined := 1
	for joined < size {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				var missing []string
				for r := 1; r < size; r++ {
					if conns[r] == nil {
						missing = append(missing, strconv.Itoa(r))
					}
				}
				return "", nil, fmt.Errorf("engine: rendezvous at %s: ranks %s did not join: %w", addr, strings.Join(missing, ","), ctx.Err())
			}
			return "", nil, fmt.Errorf("engine: rendezvous at %s: %w", addr, err)
		}
		deadline, _ := ctx.Deadline()
		c.SetDeadline(deadline)
		line, err := readLine(c)
		var r, n int
		var h uint64
		if err == nil {
			_, err = fmt.Sscanf(line, "HELLO %d %d %x\n", &r, &n, &h)
		}
		if err != nil || r < 1 || r >= size || conns[r] != nil {
			c.Close() // not one of ours, or a duplicate: ignore it
			continue
		}
		conns[r] = c
		joined++
		if refusal != "" {
			continue
		}
		switch {
		case n != size:
			refusal = fmt.Sprintf("rank %d was started for %d ranks, rank 0 for %d", r, n, size)
		case h != cfgHash:
			refusal = fmt.Sprintf("rank %d has configuration hash %#x, rank 0 has %#x: every rank must run with the same configuration", r, h, cfgHash)
		}
	}
	reply := "OK " + job + "\n"
	if refusal != "" {
		reply = "ERR " + refusal + "\n"
	}
	for _, c := range conns[1:] {
		c.Write([]byte(reply))
	}
	if refusal != "" {
		return "", nil, &RendezvousError{Msg: refusal}
	}
	for _, c := range conns[1:] {
		c.SetDeadline(time.Time{})
	}
	keep = true
	return job, conns, nil
}

// readLine reads one line from c a byte at a time, so that nothing after it is buffered away (the
// connection lives on).
func readLine(c net.Conn) (string, error) {
	var b strings.Builder
	var one [1]byte
	for b.Len() < 256 {
		if _, err := c.Read(one[:]); err != nil {
			return b.String(), err
		}
		b.WriteByte(one[0])
		if one[0] == '\n' {
			return b.String(), nil
		}
	}
	return b.String(), errors.New("line too long")
}

func rendezvousPeer(ctx context.Context, rank, size int, addr string, cfgHash uint64) (string, net.Conn, error) {
	var d net.Dialer
	var c net.Conn
	var err error
	for {
		c, err = d.DialContext(ctx, "tcp", addr)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return "", nil, fmt.Errorf("engine: rendezvous: rank %d could not reach rank 0 at %s: %w (last: %v)", rank, addr, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	keep := false
	defer func() {
		if !keep {
			c.Close()
		}
	}()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	if deadline, ok := ctx.Deadline(); ok {
		c.SetDeadline(deadline)
	}
	if _, err := fmt.Fprintf(c, "HELLO %d %d %x\n", rank, size, cfgHash); err != nil {
		stop()
		return "", nil, fmt.Errorf("engine: rendezvous: rank %d: %w", rank, err)
	}
	line, err := readLine(c)
	if !stop() { // the context ended and closed the connection
		return "", nil, fmt.Errorf("engine: rendezvous: rank %d waiting for rank 0 at %s: %w", rank, addr, ctx.Err())
	}
	if err != nil {
		return "", nil, fmt.Errorf("engine: rendezvous: rank %d waiting for rank 0 at %s: %w", rank, addr, err)
	}
	line = strings.TrimSpace(line)
	switch {
	case strings.HasPrefix(line, "OK "):
		job := strings.TrimPrefix(line, "OK ")
		if err := transport.ValidJobID(job); err != nil {
			return "", nil, fmt.Errorf("engine: rendezvous: rank 0 sent %w", err)
		}
		c.SetDeadline(time.Time{})
		keep = true
		return job, c, nil
	case strings.HasPrefix(line, "ERR "):
		return "", nil, &RendezvousError{Msg: strings.TrimPrefix(line, "ERR ")}
	}
	return "", nil, fmt.Errorf("engine: rendezvous: rank %d: unexpected reply %q", rank, line)
}

// FreeLoopbackAddr returns a 127.0.0.1 address whose port was free a moment ago.
func FreeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("engine: finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
