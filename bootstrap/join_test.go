package bootstrap

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	// Short enough that the tests of silent strangers are quick, long enough for a handshake on
	// two loaded cores under the race detector.
	handshakeTimeout = time.Second
	fatalLinger = time.Second // (TestJoinMismatch/duplicate_rank waits it out for its absent rank 2)
	logDrop = func(remote string, err error) {
		dropsMu.Lock()
		drops[remote] = append(drops[remote], err.Error())
		dropsMu.Unlock()
	}
	os.Exit(m.Run())
}

var (
	dropsMu sync.Mutex
	drops   = map[string][]string{} // rank 0's log of dropped connections, by remote address
)

// dropped returns what rank 0 logged about the connection from remote.
func dropped(remote string) []string {
	dropsMu.Lock()
	defer dropsMu.Unlock()
	return drops[remote]
}

const testSecret = Secret("test-secret-0123456789")

var (
	portsMu sync.Mutex
	ports   = map[string]bool{} // handed out by freeAddr
)

// freeAddr returns a loopback address whose port was free a moment ago and that no other test
// of this process was given (the kernel may hand a closed port out again at once, and the
// parallel tests would then fight over it).
func freeAddr(t *testing.T) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		a := ln.Addr().String()
		ln.Close()
		if !ports[a] {
			ports[a] = true
			return a
		}
	}
}

type result struct {
	roster Roster
	err    error
}

// joinAll runs Join for every identity at once, each with its own timeout, and returns the
// results in order.
func joinAll(t *testing.T, ids []Identity, timeout time.Duration) []result {
	t.Helper()
	out := make([]result, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			out[i].roster, out[i].err = Join(ctx, id, endpointOf(id.Rank))
		})
	}
	wg.Wait()
	return out
}

func endpointOf(rank int) Endpoint {
	return Endpoint{Addrs: []string{"127.0.0.1:" + strconv.Itoa(40000+rank), "[::1]:" + strconv.Itoa(40000+rank)}}
}

// job builds the identities of a job whose rank r runs on node nodes[r], local ranks in rank
// order.
func job(nodes []string, rendezvous string, secret Secret) []Identity {
	count := map[string]int{}
	for _, n := range nodes {
		count[n]++
	}
	seen := map[string]int{}
	var ids []Identity
	for r, n := range nodes {
		ids = append(ids, Identity{
			Rank: r, Size: len(nodes), LocalRank: seen[n], LocalSize: count[n], Node: n, Host: "host-" + n,
			Launcher: Mpirun, Rendezvous: rendezvous, Secret: secret,
		})
		seen[n]++
	}
	return ids
}

func TestJoin(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []string
		want  []NodeRanks // written by hand from nodes
	}{
		{"1 rank", []string{"a"}, []NodeRanks{{"a", []int{0}}}},
		{"2 ranks, 2 nodes", []string{"a", "b"}, []NodeRanks{{"a", []int{0}}, {"b", []int{1}}}},
		{"5 ranks, 2 nodes interleaved", []string{"a", "b", "a", "b", "b"}, []NodeRanks{{"a", []int{0, 2}}, {"b", []int{1, 3, 4}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, secret := range []Secret{"", testSecret} {
				ids := job(tc.nodes, freeAddr(t), secret)
				res := joinAll(t, ids, 5*time.Second)
				for r, got := range res {
					require.NoError(t, got.err, "rank %d", r)
					assert.Equal(t, len(tc.nodes), got.roster.Size)
					assert.Equal(t, tc.want, got.roster.Nodes, "rank %d", r)
					require.Len(t, got.roster.Records, len(tc.nodes))
					for q, rec := range got.roster.Records {
						assert.Equal(t, Record{Rank: q, LocalRank: ids[q].LocalRank, LocalSize: ids[q].LocalSize,
							Node: tc.nodes[q], Host: "host-" + tc.nodes[q], Endpoint: endpointOf(q)}, rec)
					}
					assert.Equal(t, res[0].roster, got.roster)
				}
				last := len(tc.nodes) - 1
				assert.Equal(t, tc.want[len(tc.want)-1].Ranks, res[0].roster.Local(last))
			}
		})
	}
}

// TestJoinLaunchers feeds each launcher's environment, as it sets it, to FromEnv and Join.
func TestJoinLaunchers(t *testing.T) {
	addr := func(t *testing.T) (string, string) {
		host, port, err := net.SplitHostPort(freeAddr(t))
		require.NoError(t, err)
		return host, port
	}
	for _, tc := range []struct {
		name  string
		env   func(t *testing.T) func(rank int) map[string]string // rank -> environment, 4 ranks on 2 nodes
		hosts [2]string                                           // the two hosts' names (h0, h1 when empty)
	}{
		{"torchrun", func(t *testing.T) func(int) map[string]string {
			host, port := addr(t)
			p, _ := strconv.Atoi(port)
			return func(r int) map[string]string {
				return map[string]string{"RANK": strconv.Itoa(r), "WORLD_SIZE": "4", "LOCAL_RANK": strconv.Itoa(r % 2),
					"LOCAL_WORLD_SIZE": "2", "GROUP_RANK": strconv.Itoa(r / 2), "MASTER_ADDR": host,
					"MASTER_PORT": strconv.Itoa(p - 1), "TORCHELASTIC_USE_AGENT_STORE": "True"}
			}
		}, [2]string{}},
		{"srun", func(t *testing.T) func(int) map[string]string {
			_, port := addr(t)
			return func(r int) map[string]string {
				return map[string]string{"SLURM_PROCID": strconv.Itoa(r), "SLURM_NTASKS": "4", "SLURM_LOCALID": strconv.Itoa(r % 2),
					"SLURM_NODEID": strconv.Itoa(r / 2), "SLURM_STEP_NODELIST": "localhost,127.0.0.[2]",
					"SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "MASTER_PORT": port}
			}
		}, [2]string{}},
		{"mpirun -x MASTER_ADDR -x MASTER_PORT", func(t *testing.T) func(int) map[string]string {
			host, port := addr(t)
			return func(r int) map[string]string {
				return map[string]string{"OMPI_COMM_WORLD_RANK": strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE": "4",
					"OMPI_COMM_WORLD_LOCAL_RANK": strconv.Itoa(r % 2), "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
					"MASTER_ADDR": host, "MASTER_PORT": port}
			}
		}, [2]string{}},
		{"mpirun with a file rendezvous", func(t *testing.T) func(int) map[string]string {
			path := filepath.Join(t.TempDir(), "job.rdv")
			return func(r int) map[string]string {
				return map[string]string{"OMPI_COMM_WORLD_RANK": strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE": "4",
					"OMPI_COMM_WORLD_LOCAL_RANK": strconv.Itoa(r % 2), "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
					"COLLPLAN_INIT": "file://" + path, "COLLPLAN_JOB_SECRET": string(testSecret)}
			}
		}, [2]string{"localhost", "h1"}}, // rank 0 publishes its hostname: one that resolves
		{"NCCL_COMM_ID", func(t *testing.T) func(int) map[string]string {
			host, port := addr(t)
			return func(r int) map[string]string {
				return map[string]string{"OMPI_COMM_WORLD_RANK": strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE": "4",
					"OMPI_COMM_WORLD_LOCAL_RANK": strconv.Itoa(r % 2), "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
					"NCCL_COMM_ID": net.JoinHostPort(host, port), "MASTER_ADDR": "192.0.2.1", "MASTER_PORT": "1"}
			}
		}, [2]string{}},
		{"the engine's launcher", func(t *testing.T) func(int) map[string]string {
			a := freeAddr(t)
			return func(r int) map[string]string {
				return map[string]string{"COLLPLAN_RANK": strconv.Itoa(r), "COLLPLAN_WORLD_SIZE": "4", "COLLPLAN_ADDR": a, "COLLPLAN_JOB": "7.ab"}
			}
		}, [2]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			envOf := tc.env(t)
			if tc.hosts[0] == "" {
				tc.hosts = [2]string{"h0", "h1"}
			}
			var ids []Identity
			for r := range 4 {
				// Two "hosts": mpirun's node id is the hostname; the others name their nodes.
				id, err := FromEnv(lookupIn(envOf(r)), tc.hosts[r/2])
				require.NoError(t, err)
				ids = append(ids, id)
			}
			res := joinAll(t, ids, 5*time.Second)
			want := []NodeRanks{{ids[0].Node, []int{0, 1}}, {ids[2].Node, []int{2, 3}}}
			if ids[0].Launcher == Collplan { // one host: every rank is local
				want = []NodeRanks{{"h0", []int{0, 1}}, {"h1", []int{2, 3}}}
			}
			for r, got := range res {
				if ids[0].Launcher == Collplan {
					// The engine's launcher says its ranks share a host; the two hostnames
					// here contradict it, and rank 0 says so.
					require.Error(t, got.err, "rank %d", r)
					assert.Contains(t, got.err.Error(), `node "h0" has 2 ranks (0-1) but rank 0 says it has 4`)
					continue
				}
				require.NoError(t, got.err, "rank %d", r)
				assert.Equal(t, want, got.roster.Nodes)
			}
		})
	}
}

// TestJoinEngineLauncherOneHost is the engine launcher's real shape: every rank on one host.
func TestJoinEngineLauncherOneHost(t *testing.T) {
	a := freeAddr(t)
	var ids []Identity
	for r := range 3 {
		id, err := FromEnv(lookupIn(map[string]string{"COLLPLAN_RANK": strconv.Itoa(r), "COLLPLAN_WORLD_SIZE": "3", "COLLPLAN_ADDR": a}), "h")
		require.NoError(t, err)
		ids = append(ids, id)
	}
	for r, got := range joinAll(t, ids, 5*time.Second) {
		require.NoError(t, got.err, "rank %d", r)
		assert.Equal(t, []NodeRanks{{"h", []int{0, 1, 2}}}, got.roster.Nodes)
	}
}

// dialRetry connects to addr, retrying while rank 0 starts.
func dialRetry(addr string) (net.Conn, error) {
	var err error
	for range 400 {
		var c net.Conn
		if c, err = net.Dial("tcp", addr); err == nil {
			c.SetDeadline(time.Now().Add(5 * time.Second))
			return c, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil, err
}

// rawHello sends a Hello on c and returns rank 0's challenge payload.
func rawHello(c net.Conn) ([]byte, error) {
	if err := writeFrame(c, frameHello, append([]byte(protocolMagic), newNonce()...)); err != nil {
		return nil, err
	}
	return expect(c, maxHandshakeFrame, frameChallenge)
}

// errSetup marks a stranger that could not even play its part (the test's fault, not rank 0's).
var errSetup = errors.New("stranger setup")

// TestJoinStrangers: strangers with the wrong secret, a reflected proof, a silent connection and
// malformed frames are each dropped while the real ranks still meet.
func TestJoinStrangers(t *testing.T) {
	addr := freeAddr(t)
	ids := job([]string{"a", "a", "b"}, addr, testSecret)
	readOne := func(c net.Conn) error {
		_, err := c.Read(make([]byte, 1))
		return err
	}
	type stranger struct {
		name string
		// run plays the stranger on c and returns its view of its refusal; played is closed once
		// it has said what it had to say.
		run func(c net.Conn, played func()) error
	}
	strangers := []stranger{
		{"wrong secret", func(c net.Conn, played func()) error {
			defer played()
			return peerHandshake(c, "another-secret-0123456789")
		}},
		{"wrong secret, ignoring rank 0's proof", func(c net.Conn, played func()) error {
			defer played()
			ch, err := rawHello(c)
			if err != nil {
				return fmt.Errorf("%w: %v", errSetup, err)
			}
			nc := make([]byte, nonceLen) // any nonce: it did not keep its own
			writeFrame(c, frameProof, proof("another-secret-0123456789", labelPeer, nc, ch[:nonceLen]))
			_, err = expect(c, maxRecordFrame, frameRoster)
			return err
		}},
		{"rank 0's own proof reflected", func(c net.Conn, played func()) error {
			defer played()
			ch, err := rawHello(c)
			if err != nil {
				return fmt.Errorf("%w: %v", errSetup, err)
			}
			writeFrame(c, frameProof, ch[nonceLen:])
			_, err = expect(c, maxRecordFrame, frameRoster)
			return err
		}},
		{"silent", func(c net.Conn, played func()) error {
			played()
			return readOne(c) // until rank 0 ends or the handshake deadline
		}},
		{"oversized frame", func(c net.Conn, played func()) error {
			defer played()
			c.Write(binary.BigEndian.AppendUint32(nil, 1<<30))
			return readOne(c)
		}},
		{"empty frame", func(c net.Conn, played func()) error {
			defer played()
			c.Write([]byte{0, 0, 0, 0})
			return readOne(c)
		}},
		{"unknown frame type", func(c net.Conn, played func()) error {
			defer played()
			c.Write(appendFrame(nil, 'Z', []byte("hi")))
			return readOne(c)
		}},
		{"HTTP", func(c net.Conn, played func()) error {
			defer played()
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			return readOne(c)
		}},
		{"authenticated, malformed record", func(c net.Conn, played func()) error {
			defer played()
			if err := peerHandshake(c, testSecret); err != nil {
				return fmt.Errorf("%w: %v", errSetup, err)
			}
			writeFrame(c, frameRecord, []byte(`{"rank":1,"bogus":true}`))
			return readOne(c)
		}},
		{"authenticated, a rank that is no peer", func(c net.Conn, played func()) error {
			defer played()
			if err := peerHandshake(c, testSecret); err != nil {
				return fmt.Errorf("%w: %v", errSetup, err)
			}
			writeFrame(c, frameRecord, mustJSON(wireRecord{Record: Record{Rank: 0, Node: "x", LocalSize: 1}, Size: 3}))
			_, err := expect(c, maxRecordFrame, frameRoster)
			return err
		}},
	}
	// Ranks 0 and 1 start with the strangers; rank 2 once every stranger has played, so the job
	// cannot be over before they are refused.
	res := make([]result, 3)
	var wg sync.WaitGroup
	var playedAll sync.WaitGroup
	runRank := func(r int) {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		res[r].roster, res[r].err = Join(ctx, ids[r], endpointOf(r))
	}
	wg.Go(func() { runRank(0) })
	wg.Go(func() { runRank(1) })
	errs := make([]error, len(strangers))
	local := make([]string, len(strangers))
	for i, s := range strangers {
		playedAll.Add(1)
		wg.Go(func() {
			c, err := dialRetry(addr)
			if err != nil {
				errs[i] = fmt.Errorf("%w: %v", errSetup, err)
				playedAll.Done()
				return
			}
			defer c.Close()
			local[i] = c.LocalAddr().String()
			errs[i] = s.run(c, sync.OnceFunc(playedAll.Done))
		})
	}
	wg.Go(func() {
		playedAll.Wait()
		runRank(2)
	})
	wg.Wait()
	for r, got := range res {
		require.NoError(t, got.err, "rank %d", r)
		assert.Equal(t, []NodeRanks{{"a", []int{0, 1}}, {"b", []int{2}}}, got.roster.Nodes)
	}
	// What rank 0's log says of each; not of the silent one, nor of the one that hung up on rank
	// 0's failed proof (rank 0 may be done before it sees the EOF, and then says nothing).
	logged := map[string]string{
		"wrong secret, ignoring rank 0's proof": "authentication failed",
		"rank 0's own proof reflected":          "authentication failed",
		"oversized frame":                       "1073741824 bytes, over the limit of 4096",
		"empty frame":                           "empty frame",
		"unknown frame type":                    "unknown type 0x5a",
		"HTTP":                                  "over the limit of 4096", // "GET " read as a length
		"authenticated, malformed record":       `unknown field "bogus"`,
		"authenticated, a rank that is no peer": "rank 0 is not a peer rank of this job of 3 ranks",
	}
	for i, s := range strangers {
		require.Error(t, errs[i], s.name)
		require.NotErrorIs(t, errs[i], errSetup, s.name)
		if want, ok := logged[s.name]; ok {
			log := dropped(local[i])
			if assert.Len(t, log, 1, "%s: rank 0 logs the drop", s.name) {
				assert.Contains(t, log[0], want, s.name)
			}
		}
		var re *RemoteError
		switch {
		case s.name == "wrong secret":
			assert.ErrorIs(t, errs[i], ErrAuth, "the stranger sees rank 0's proof fail")
		case errors.As(errs[i], &re):
			assert.False(t, re.Fatal, "%s: a stranger's refusal is not the job's verdict", s.name)
			if s.name != "authenticated, a rank that is no peer" {
				assert.Contains(t, re.Msg, "authentication failed", s.name)
			}
		default:
			assert.True(t, errors.Is(errs[i], io.EOF) || isReset(errs[i]), "%s: %v", s.name, errs[i])
		}
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

// TestHandshakeReplay: a peer's recorded handshake, replayed to rank 0, fails (rank 0's nonce is
// fresh each time); a recorded rank 0 answer replayed to a peer fails the same way.
func TestHandshakeReplay(t *testing.T) {
	// A genuine handshake, with the peer's bytes recorded.
	var peerBytes, rootBytes recorder
	a, b := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- rootHandshake(rootBytes.wrap(b), testSecret) }()
	require.NoError(t, peerHandshake(peerBytes.wrap(a), testSecret))
	require.NoError(t, <-done)
	a.Close()
	b.Close()

	// The peer's bytes replayed to a fresh rank 0.
	a, b = net.Pipe()
	go func() { done <- rootHandshake(b, testSecret) }()
	go io.Copy(io.Discard, a)
	go a.Write(peerBytes.buf) // hello, then the recorded proof
	err := <-done
	assert.ErrorIs(t, err, ErrAuth)
	a.Close()
	b.Close()

	// Rank 0's bytes replayed to a fresh peer.
	a, b = net.Pipe()
	go func() {
		readFrame(b, maxHandshakeFrame) // the peer's hello
		b.Write(rootBytes.buf)
		io.Copy(io.Discard, b)
	}()
	assert.ErrorIs(t, peerHandshake(a, testSecret), ErrAuth)
	a.Close()
	b.Close()
}

// recorder wraps a connection and keeps what is written to it.
type recorder struct {
	mu  sync.Mutex
	buf []byte
}

type recConn struct {
	net.Conn
	r *recorder
}

func (c *recConn) Write(p []byte) (int, error) {
	c.r.mu.Lock()
	c.r.buf = append(c.r.buf, p...)
	c.r.mu.Unlock()
	return c.Conn.Write(p)
}

func (r *recorder) wrap(c net.Conn) *recConn { return &recConn{Conn: c, r: r} }

// TestJoinMissingRank: a rank that never starts is named on every rank, within the deadline.
func TestJoinMissingRank(t *testing.T) {
	t.Parallel()
	ids := job([]string{"a", "a", "b", "b"}, freeAddr(t), "")
	const bound = 1500 * time.Millisecond
	start := time.Now()
	res := joinAll(t, ids[:3], bound) // rank 3 never starts
	elapsed := time.Since(start)
	assert.Less(t, elapsed, bound+500*time.Millisecond)
	for r, got := range res {
		require.Error(t, got.err, "rank %d", r)
		var re *RemoteError
		require.ErrorAs(t, got.err, &re, "rank %d: %v", r, got.err)
		assert.True(t, re.Fatal)
		assert.Contains(t, got.err.Error(), "ranks 3 did not join the rendezvous", "rank %d", r)
	}
}

// TestJoinMissingRankEarlyDeadline: a rank whose deadline comes before rank 0's names the ranks
// rank 0 last reported missing; a rank that never reaches rank 0 says rank 0 did not join.
func TestJoinMissingRankEarlyDeadline(t *testing.T) {
	t.Parallel()
	ids := job([]string{"a", "b", "c", "d"}, freeAddr(t), "")
	var wg sync.WaitGroup
	var early, root error
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		_, root = Join(ctx, ids[0], Endpoint{})
	})
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		_, early = Join(ctx, ids[1], Endpoint{})
	})
	wg.Wait()
	assert.ErrorContains(t, early, "rank 0 last reported ranks 2-3 missing")
	assert.ErrorContains(t, root, "ranks 2-3 did not join")

	// No rank 0 at all.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := Join(ctx, job([]string{"a", "b"}, freeAddr(t), "")[1], Endpoint{})
	assert.ErrorContains(t, err, "rank 1 could not reach rank 0 within")
	assert.ErrorContains(t, err, "rank 0 did not join")
}

// TestJoinMismatch: records that disagree fail every rank with the same error.
func TestJoinMismatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(ids []Identity)
		want string
	}{
		{"size", func(ids []Identity) { ids[2].Size, ids[2].LocalSize = 4, 1 }, "rank 2 was started for 4 ranks, rank 0 for 3"},
		{"local ranks", func(ids []Identity) { ids[1].LocalRank = 0 }, `ranks 0 and 1 both have local rank 0 on node "a"`},
		{"local size", func(ids []Identity) { ids[2].Node = "a" }, `node "a" has 3 ranks (0-2) but rank 0 says it has 2`},
		{"duplicate rank", func(ids []Identity) { ids[2] = ids[1] }, "rank 1 joined twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ids := job([]string{"a", "a", "b"}, freeAddr(t), "")
			tc.edit(ids)
			for r, got := range joinAll(t, ids, 5*time.Second) {
				var re *RemoteError
				require.ErrorAs(t, got.err, &re, "rank %d", r)
				assert.True(t, re.Fatal)
				assert.Contains(t, re.Msg, tc.want, "rank %d", r)
			}
		})
	}
}

// TestJoinEndpoint: the endpoint's shared-memory job and digest reach every rank as each rank
// sent them, and a rank whose digest differs from rank 0's fails the job on every rank, named.
func TestJoinEndpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		digests []string
		want    string // "" : the job starts
	}{
		{"same digest", []string{"d1", "d1", "d1"}, ""},
		{"rank 2 differs", []string{"d1", "d1", "d2"}, `rank 2's configuration digest "d2" differs from rank 0's "d1"`},
		{"rank 1 has none", []string{"d1", "", "d1"}, `rank 1's configuration digest "" differs from rank 0's "d1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ids := job([]string{"a", "a", "b"}, freeAddr(t), "")
			shm := []string{"job-a", "", "job-b"} // each node's local rank 0 names its node's job
			out := make([]result, len(ids))
			var wg sync.WaitGroup
			for i, id := range ids {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					ep := endpointOf(id.Rank)
					ep.Shm, ep.Digest = shm[i], tc.digests[i]
					out[i].roster, out[i].err = Join(ctx, id, ep)
				})
			}
			wg.Wait()
			for r, got := range out {
				if tc.want != "" {
					var re *RemoteError
					require.ErrorAs(t, got.err, &re, "rank %d", r)
					assert.True(t, re.Fatal)
					assert.Contains(t, re.Msg, tc.want, "rank %d", r)
					continue
				}
				require.NoError(t, got.err, "rank %d", r)
				for q, rec := range got.roster.Records {
					assert.Equal(t, shm[q], rec.Endpoint.Shm, "rank %d's roster, rank %d", r, q)
					assert.Equal(t, tc.digests[q], rec.Endpoint.Digest, "rank %d's roster, rank %d", r, q)
				}
			}
		})
	}
}

// TestJoinNeedsSecretOffLoopback: off loopback, no secret, no rendezvous.
func TestJoinNeedsSecretOffLoopback(t *testing.T) {
	for _, rank := range []int{0, 1} {
		ids := job([]string{"a", "b"}, "192.0.2.1:5000", "")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		_, err := Join(ctx, ids[rank], Endpoint{})
		cancel()
		assert.ErrorContains(t, err, "192.0.2.1:5000 is off loopback: set COLLPLAN_JOB_SECRET")
		assert.Less(t, time.Since(start), time.Second, "refused at once")
	}
	// A file rendezvous across hosts is off loopback too.
	ids := job([]string{"a", "b"}, "file://"+filepath.Join(t.TempDir(), "f"), "")
	_, err := Join(context.Background(), ids[0], Endpoint{})
	assert.ErrorContains(t, err, "set COLLPLAN_JOB_SECRET")
}

// TestJoinOffLoopback meets on this host's own non-loopback address, with a secret.
func TestJoinOffLoopback(t *testing.T) {
	t.Parallel()
	var ip net.IP
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			ip = n.IP
			break
		}
	}
	if ip == nil {
		t.Skip("no non-loopback IPv4 address here")
	}
	_, port, _ := net.SplitHostPort(freeAddr(t))
	ids := job([]string{"a", "b"}, net.JoinHostPort(ip.String(), port), testSecret)
	for r, got := range joinAll(t, ids, 5*time.Second) {
		require.NoError(t, got.err, "rank %d", r)
		assert.Equal(t, 2, got.roster.Size)
	}
}

// TestFileRendezvous: the file names rank 0's address and the job's nonce, and is gone when the
// job has met; a peer that reads a stale file before rank 0 overwrites it still joins.
func TestFileRendezvous(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "job.rdv")
	writeStale(t, path, deadAddr(t), "0011")
	ids := job([]string{"a", "a", "a"}, "file://"+path, "")
	res := make([]result, 3)
	var wg sync.WaitGroup
	for r, id := range ids {
		wg.Go(func() {
			if r == 0 {
				time.Sleep(300 * time.Millisecond) // the peers read the stale file first
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res[r].roster, res[r].err = Join(ctx, id, endpointOf(r))
		})
	}
	wg.Wait()
	for r, got := range res {
		require.NoError(t, got.err, "rank %d", r)
		assert.Equal(t, []NodeRanks{{"a", []int{0, 1, 2}}}, got.roster.Nodes)
	}
	_, err := os.Stat(path)
	assert.ErrorIs(t, err, os.ErrNotExist, "rank 0 removes the file")
}

// TestFileRendezvousStale: a file whose rank 0 does not answer, or answers for another job, is
// reported as stale at the deadline, not used.
func TestFileRendezvousStale(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		addr func(t *testing.T) string // what the stale file names
	}{
		{"dead", deadAddr},
		{"another job", func(t *testing.T) string {
			// Another job's rank 0, alive, at the address the stale file names.
			other := job([]string{"x", "x"}, freeAddr(t), "")
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			t.Cleanup(cancel)
			go Join(ctx, other[0], Endpoint{})
			return other[0].Rendezvous
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := tc.addr(t)
			path := filepath.Join(t.TempDir(), "job.rdv")
			writeStale(t, path, addr, "00ff")
			id := job([]string{"a", "a"}, "file://"+path, "")[1]
			ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
			defer cancel()
			_, err := Join(ctx, id, Endpoint{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "rendezvous file "+path+" names rank 0 at "+addr)
			assert.Contains(t, err.Error(), "by pid 999999 on deadhost")
			assert.Contains(t, err.Error(), "the file is stale, from an earlier job; COLLPLAN_INIT's file must be fresh for each job")
			if tc.name == "another job" {
				assert.Contains(t, err.Error(), `job nonce "00ff" is not this job's`)
			}
		})
	}
	t.Run("not a rendezvous file", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "job.rdv")
		require.NoError(t, os.WriteFile(path, []byte("hello\n"), 0o600))
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := Join(ctx, job([]string{"a", "a"}, "file://"+path, "")[1], Endpoint{})
		assert.ErrorContains(t, err, path+" is not a rendezvous file")
	})
	t.Run("no file", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "job.rdv")
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := Join(ctx, job([]string{"a", "a"}, "file://"+path, "")[1], Endpoint{})
		assert.ErrorContains(t, err, "rank 0 has not published its address in "+path)
	})
}

// deadAddr returns a loopback address nobody listens on.
func deadAddr(t *testing.T) string { return freeAddr(t) }

func writeStale(t *testing.T, path, addr, nonce string) {
	t.Helper()
	b, err := json.Marshal(rendezvousFile{Addr: addr, Nonce: nonce, Host: "deadhost", PID: 999999, Written: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

// TestJoinSilentStrangerDoesNotDelay: rank 0 returns once the ranks have met, without waiting
// out the handshake deadline of a stranger that connected and said nothing.
func TestJoinSilentStrangerDoesNotDelay(t *testing.T) {
	t.Parallel()
	ids := job([]string{"a", "b"}, freeAddr(t), "")
	var rootTime time.Duration
	var rootErr error
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		close(started)
		start := time.Now()
		_, rootErr = Join(ctx, ids[0], Endpoint{})
		rootTime = time.Since(start)
	})
	<-started
	var silent net.Conn
	var err error
	for range 200 {
		if silent, err = net.Dial("tcp", ids[0].Rendezvous); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, err)
	defer silent.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = Join(ctx, ids[1], Endpoint{})
	require.NoError(t, err)
	wg.Wait()
	require.NoError(t, rootErr)
	assert.Less(t, rootTime, handshakeTimeout/2, "rank 0 waited for the silent stranger's handshake deadline")
}

// TestJoinProcesses runs a torchrun-shaped job of 3 ranks as 3 processes (this test binary,
// rerun), each reading its identity from its own environment with os.LookupEnv.
func TestJoinProcesses(t *testing.T) {
	t.Parallel()
	host, port, err := net.SplitHostPort(freeAddr(t))
	require.NoError(t, err)
	var cmds []*exec.Cmd
	outs := make([]*bytes.Buffer, 3)
	for r := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestJoinHelperProcess$", "-test.count=1")
		outs[r] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		cmd.Env = append(os.Environ(), "BOOTSTRAP_HELPER=1",
			"RANK="+strconv.Itoa(r), "WORLD_SIZE=3", "LOCAL_RANK="+strconv.Itoa(r%2), "LOCAL_WORLD_SIZE="+[]string{"2", "2", "1"}[r],
			"GROUP_RANK="+strconv.Itoa(r/2), "MASTER_ADDR="+host, "MASTER_PORT="+port, "COLLPLAN_JOB_SECRET="+string(testSecret))
		require.NoError(t, cmd.Start())
		cmds = append(cmds, cmd)
	}
	for r, cmd := range cmds {
		err := cmd.Wait()
		require.NoError(t, err, "rank %d: %s", r, outs[r])
		assert.Contains(t, outs[r].String(), `roster: [{0 [0 1]} {1 [2]}]`, "rank %d", r)
	}
}

// TestJoinHelperProcess is one rank of TestJoinProcesses.
func TestJoinHelperProcess(t *testing.T) {
	if os.Getenv("BOOTSTRAP_HELPER") != "1" {
		t.Skip("a rank of TestJoinProcesses")
	}
	id, err := FromEnv(os.LookupEnv, "helper-host")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	roster, err := Join(ctx, id, endpointOf(id.Rank))
	require.NoError(t, err)
	fmt.Printf("roster: %v\n", roster.Nodes)
}
