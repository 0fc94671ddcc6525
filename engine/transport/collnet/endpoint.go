package collnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/kernels"
)

// IOTimeout bounds every frame once begun, every write, a dial, and how long a launcher waits for
// a started endpoint to listen.
const IOTimeout = 10 * time.Second

// NCCLSteps is NCCL_STEPS, the credits of a connection to the endpoint.
const NCCLSteps = wire.NCCLSteps

// MaxHeads is NCCL_MAX_DIRECT_ARITY+1: CollNetDirect's most local ranks, the shares of a step.
const MaxHeads = 8

// closeWait bounds how long a contributor's goodbye may take (the engine's Session has the same).
const closeWait = 250 * time.Millisecond

// The CollNet aggregation endpoint: a server that stands for a reducing switch (SHARP), the
// network half of CollNetDirect and CollNetChain (the engine's collnet.go). NCCL hands each node's share of a
// step to the collnet plugin through the collnet send proxy and gets the reduction across the
// nodes back through the collnet recv proxy (src/transport/coll_net.cc); here the plugin and the
// switch are one process that every head reaches over a TCP connection.
//
// Groups. A head connects once per (channel, share) and says which job, channel, share, node and
// node count it is (the hello). The connections of one job, channel and share form a group of
// nNodes contributors, one per virtual node. Per step, every contributor sends its node's partial
// result of that share; once the group's nNodes contributions of the step are in, the endpoint
// sends the reduction back to every contributor. It reduces with the kernels package, in the
// order the contributions arrive (a switch's order is not the ranks' either; every rank gets the
// same bytes).
//
// Fixed buffers and backpressure. A contributor never has more than NCCL_STEPS steps outstanding
// (sent, their result not yet consumed: the credits of a connection's FIFO), so the endpoint holds
// at most NCCL_STEPS accumulators of the group's step size per group, plus one frame buffer per
// connection, whatever the message size; a step whose slot is still busy with step-NCCL_STEPS is
// a protocol error. The step size is the hello's, at most CollNetMaxStep.
//
// Validation and failure. Every frame is checked (kind, step order, size, dtype, operator, and that
// the contributors of a step agree on them); a bad frame, a hello that does not fit its group, or a
// connection that ends without the goodbye fails the whole job: the endpoint sends every
// connection of the job an error frame saying why and closes them, so every head's communicator
// aborts (the head that reads the error, or the end of the connection, stores the abort word). A
// frame that has begun must arrive whole within IOTimeout; every write to a contributor has the
// same deadline. Nothing read is trusted as a
// size before it is checked, so a bad peer cannot make the endpoint allocate.
//
// Collectives. The endpoint is a plugin with iallgather and ireducescatter besides the reduction
// (Has): every data frame names its collective, and the contributors of a step must agree on it.
// With B the bytes one node sends in a step: AllReduce returns the B bytes reduced across the
// nodes; AllGather returns nNodes*B bytes, node k's contribution at k*B; ReduceScatter takes
// nNodes slices of B/nNodes bytes, reduces them across the nodes and returns slice k to node k.
// A step's per-node part (B for AllReduce and AllGather, B/nNodes for ReduceScatter) is at most
// the hello's maxStep, and no frame either way exceeds CollNetMaxFrame.
//
// Wire format (little-endian):
//
//	hello   (48 B)  magic u32 "CNT1", version u32 (2), job u64, channel u32, share u32, node u32,
//	                nNodes u32, maxStep u32, 12 zero bytes
//	data    (24 B + payload)  kind u32 (1), dtype u8, op u8, collective u8 (0 AllReduce,
//	                1 AllGather, 2 ReduceScatter), 1 zero byte, step u64, bytes u32,
//	                4 zero bytes, then bytes of payload (contributor to endpoint)
//	result  (24 B + payload)  kind u32 (1), 4 zero bytes, step u64, bytes u32, 4 zero bytes,
//	                payload (endpoint to contributor)
//	error   (24 B + message)  kind u32 (2), ..., bytes u32 = the message's length (<= 4 KiB)
//	bye     (24 B)  kind u32 (3): the contributor closes cleanly
const (
	cnMagic      = 0x31544e43 // "CNT1"
	cnVersion    = 2          // 2: data frames name their collective (AllGather, ReduceScatter)
	cnHelloBytes = 48
	cnHdrBytes   = 24
	cnKindData   = 1
	cnKindError  = 2
	cnKindBye    = 3
	cnMaxErrMsg  = 4 << 10

	// CollNetMaxStep is the largest step (bytes of one share of one step) the endpoint accepts.
	CollNetMaxStep = 16 << 20
	// CollNetMaxNodes is the most contributors (virtual nodes) a group may have.
	CollNetMaxNodes = 1 << 12
	// CollNetMaxFrame is the largest payload of a frame either way (an AllGather result or a
	// ReduceScatter contribution is nNodes per-node parts).
	CollNetMaxFrame = 64 << 20
)

// Coll is a collective the endpoint runs across the nodes.
type Coll uint8

// The endpoint's collectives (the data frame's collective byte).
const (
	AllReduce Coll = iota
	AllGather
	ReduceScatter
	numColls
)

func (c Coll) String() string {
	switch c {
	case AllReduce:
		return "AllReduce"
	case AllGather:
		return "AllGather"
	case ReduceScatter:
		return "ReduceScatter"
	}
	return fmt.Sprintf("collective %d", int(c))
}

// Has reports whether the endpoint runs collective c: what a collnet plugin advertises (NCCL asks
// for iallgather and ireducescatter before it prices CollNetDirect AllGather and ReduceScatter).
func Has(c Coll) bool { return c < numColls }

// CollNetEnv is the environment variable that gives rank processes the endpoint's address.
const CollNetEnv = "COLLPLAN_COLLNET_ADDR"

// JobID is the endpoint's id of job name job.
func JobID(job string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("collnet\x00" + job))
	return h.Sum64()
}

// cnHello is a contributor's hello.
type cnHello struct {
	job                              uint64
	ch, share, node, nNodes, maxStep uint32
}

func (h cnHello) put(b []byte) {
	le := binary.LittleEndian
	clear(b[:cnHelloBytes])
	le.PutUint32(b[0:], cnMagic)
	le.PutUint32(b[4:], cnVersion)
	le.PutUint64(b[8:], h.job)
	le.PutUint32(b[16:], h.ch)
	le.PutUint32(b[20:], h.share)
	le.PutUint32(b[24:], h.node)
	le.PutUint32(b[28:], h.nNodes)
	le.PutUint32(b[32:], h.maxStep)
}

func parseHello(b []byte) (cnHello, error) {
	le := binary.LittleEndian
	if m := le.Uint32(b[0:]); m != cnMagic {
		return cnHello{}, fmt.Errorf("hello: magic %#x, want %#x (not a collplan CollNet client)", m, cnMagic)
	}
	if v := le.Uint32(b[4:]); v != cnVersion {
		return cnHello{}, fmt.Errorf("hello: protocol version %d, this endpoint speaks %d", v, cnVersion)
	}
	h := cnHello{job: le.Uint64(b[8:]), ch: le.Uint32(b[16:]), share: le.Uint32(b[20:]), node: le.Uint32(b[24:]),
		nNodes: le.Uint32(b[28:]), maxStep: le.Uint32(b[32:])}
	switch {
	case h.ch >= wire.MaxChannels:
		return h, fmt.Errorf("hello: channel %d (at most %d channels)", h.ch, wire.MaxChannels)
	case h.share >= MaxHeads:
		return h, fmt.Errorf("hello: share %d out of range", h.share)
	case h.nNodes < 2 || h.nNodes > CollNetMaxNodes:
		return h, fmt.Errorf("hello: %d nodes (want 2..%d)", h.nNodes, CollNetMaxNodes)
	case h.node >= h.nNodes:
		return h, fmt.Errorf("hello: node %d of %d", h.node, h.nNodes)
	case h.maxStep == 0 || h.maxStep > CollNetMaxStep || h.maxStep%8 != 0:
		return h, fmt.Errorf("hello: step of %d bytes (want a positive multiple of 8 up to %d)", h.maxStep, CollNetMaxStep)
	}
	return h, nil
}

// putHdr writes a frame header.
func putHdr(b []byte, kind uint32, dt kernels.Dtype, op kernels.Op, step uint64, nb int) {
	putHdrColl(b, kind, AllReduce, dt, op, step, nb)
}

// putHdrColl writes a frame header naming collective k.
func putHdrColl(b []byte, kind uint32, k Coll, dt kernels.Dtype, op kernels.Op, step uint64, nb int) {
	le := binary.LittleEndian
	clear(b[:cnHdrBytes])
	le.PutUint32(b[0:], kind)
	b[4], b[5], b[6] = byte(dt), byte(op), byte(k)
	le.PutUint64(b[8:], step)
	le.PutUint32(b[16:], uint32(nb))
}

// CollNetEndpoint is an aggregation endpoint serving on a listener (see above). It serves any
// number of jobs at once; a job's connections fail together.
type CollNetEndpoint struct {
	ln net.Listener

	mu     sync.Mutex
	jobs   map[uint64]*cnJob
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	// Errorf, when set before the first connection, receives one line per failed job.
	Errorf func(format string, args ...any)
}

type cnJob struct {
	id      uint64
	groups  map[[2]uint32]*cnGroup // by (channel, share)
	members int
	failed  bool
}

type cnGroup struct {
	mu      sync.Mutex
	job     *cnJob
	key     [2]uint32
	nNodes  int
	maxStep int
	members []*cnMember // by node
	joined  int
	slots   [NCCLSteps]cnSlot
	hdr     [cnHdrBytes]byte // a ReduceScatter result's header (under mu)
}

type cnSlot struct {
	step  uint64
	n     int // contributions in
	coll  Coll
	dt    kernels.Dtype
	op    kernels.Op
	nb    int
	red   kernels.Reducer
	frame []byte // the result frame: its header, then the accumulator
}

type cnMember struct {
	conn net.Conn
	node int
	next uint64 // the next step this contributor may send
	wmu  sync.Mutex
}

// ListenCollNet starts an endpoint listening on TCP address addr ("127.0.0.1:0" picks a port).
// Close stops it.
func ListenCollNet(addr string) (*CollNetEndpoint, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("engine: CollNet endpoint: %w", err)
	}
	return ServeCollNet(ln), nil
}

// ServeCollNet starts an endpoint on ln; it owns ln from then on.
func ServeCollNet(ln net.Listener) *CollNetEndpoint {
	e := &CollNetEndpoint{ln: ln, jobs: make(map[uint64]*cnJob), conns: make(map[net.Conn]struct{})}
	e.wg.Add(1)
	go e.accept()
	return e
}

// Addr returns the address the endpoint listens on (for COLLPLAN_COLLNET_ADDR).
func (e *CollNetEndpoint) Addr() string { return e.ln.Addr().String() }

// Close stops the endpoint: it closes the listener and every connection (their jobs see the
// endpoint gone) and waits for its goroutines.
func (e *CollNetEndpoint) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	err := e.ln.Close()
	for c := range e.conns {
		c.Close()
	}
	e.mu.Unlock()
	e.wg.Wait()
	return err
}

// Jobs returns the number of jobs with live connections.
func (e *CollNetEndpoint) Jobs() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.jobs)
}

func (e *CollNetEndpoint) accept() {
	defer e.wg.Done()
	for {
		c, err := e.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			c.Close()
			return
		}
		e.conns[c] = struct{}{}
		e.wg.Add(1)
		e.mu.Unlock()
		go e.serve(c)
	}
}

func (e *CollNetEndpoint) logf(format string, args ...any) {
	if e.Errorf != nil {
		e.Errorf(format, args...)
	}
}

// serve runs one contributor's connection: the hello, then its frames until the goodbye or a
// failure.
func (e *CollNetEndpoint) serve(c net.Conn) {
	defer e.wg.Done()
	defer func() {
		e.mu.Lock()
		delete(e.conns, c)
		e.mu.Unlock()
		c.Close()
	}()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetKeepAlive(true)
		tc.SetKeepAlivePeriod(time.Second)
	}
	var hb [cnHelloBytes]byte
	c.SetReadDeadline(time.Now().Add(IOTimeout))
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		return // not a contributor (or gone before its hello): nothing to fail
	}
	h, err := parseHello(hb[:])
	if err != nil {
		sendErr(c, nil, err.Error())
		e.logf("collnet endpoint: %s: %v", c.RemoteAddr(), err)
		return
	}
	g, m, err := e.join(c, h)
	if err != nil {
		sendErr(c, nil, err.Error())
		e.logf("collnet endpoint: %s: %v", c.RemoteAddr(), err)
		return
	}
	var buf []byte // grown to the largest checked frame (at most CollNetMaxFrame)
	var hdr [cnHdrBytes]byte
	for {
		c.SetReadDeadline(time.Time{}) // a contributor may idle between calls for as long as it likes
		if _, err := io.ReadFull(c, hdr[:1]); err != nil {
			e.fail(g.job, fmt.Sprintf("channel %d share %d: node %d's connection ended without a goodbye (%v)", g.key[0], g.key[1], m.node, err))
			return
		}
		c.SetReadDeadline(time.Now().Add(IOTimeout))
		if _, err := io.ReadFull(c, hdr[1:]); err != nil {
			e.fail(g.job, fmt.Sprintf("channel %d share %d: node %d: frame header: %v", g.key[0], g.key[1], m.node, err))
			return
		}
		le := binary.LittleEndian
		kind := le.Uint32(hdr[0:])
		if kind == cnKindBye {
			e.leave(g, m)
			return
		}
		dt, op, k, step, nb := kernels.Dtype(hdr[4]), kernels.Op(hdr[5]), Coll(hdr[6]), le.Uint64(hdr[8:]), int(le.Uint32(hdr[16:]))
		if msg := g.check(m, kind, k, dt, op, step, nb); msg != "" {
			e.fail(g.job, fmt.Sprintf("channel %d share %d: node %d: %s", g.key[0], g.key[1], m.node, msg))
			return
		}
		if nb > len(buf) {
			buf = make([]byte, nb)
		}
		if _, err := io.ReadFull(c, buf[:nb]); err != nil {
			e.fail(g.job, fmt.Sprintf("channel %d share %d: node %d: step %d payload: %v", g.key[0], g.key[1], m.node, step, err))
			return
		}
		if msg := g.contribute(m, k, dt, op, step, buf[:nb]); msg != "" {
			e.fail(g.job, fmt.Sprintf("channel %d share %d: %s", g.key[0], g.key[1], msg))
			return
		}
	}
}

// join adds the contributor of hello h to its group.
func (e *CollNetEndpoint) join(c net.Conn, h cnHello) (*cnGroup, *cnMember, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.jobs[h.job]
	if j == nil {
		j = &cnJob{id: h.job, groups: make(map[[2]uint32]*cnGroup)}
		e.jobs[h.job] = j
	}
	if j.failed {
		return nil, nil, fmt.Errorf("job %#x has failed", h.job)
	}
	key := [2]uint32{h.ch, h.share}
	g := j.groups[key]
	if g == nil {
		g = &cnGroup{job: j, key: key, nNodes: int(h.nNodes), maxStep: int(h.maxStep), members: make([]*cnMember, h.nNodes)}
		j.groups[key] = g
	}
	switch {
	case g.nNodes != int(h.nNodes):
		return nil, nil, fmt.Errorf("channel %d share %d: node %d says %d nodes, the group has %d", h.ch, h.share, h.node, h.nNodes, g.nNodes)
	case g.maxStep != int(h.maxStep):
		return nil, nil, fmt.Errorf("channel %d share %d: node %d says steps of %d bytes, the group has %d", h.ch, h.share, h.node, h.maxStep, g.maxStep)
	case g.members[h.node] != nil:
		return nil, nil, fmt.Errorf("channel %d share %d: node %d joined twice", h.ch, h.share, h.node)
	}
	m := &cnMember{conn: c, node: int(h.node)}
	g.mu.Lock()
	g.members[h.node] = m
	g.joined++
	g.mu.Unlock()
	j.members++
	return g, m, nil
}

// leave removes a contributor that said goodbye.
func (e *CollNetEndpoint) leave(g *cnGroup, m *cnMember) {
	e.mu.Lock()
	defer e.mu.Unlock()
	g.mu.Lock()
	if g.members[m.node] == m {
		g.members[m.node] = nil
		g.joined--
	}
	empty := g.joined == 0
	g.mu.Unlock()
	j := g.job
	if empty {
		delete(j.groups, g.key)
	}
	if j.members--; j.members == 0 && !j.failed {
		delete(e.jobs, j.id)
	}
}

// fail fails job j: every connection of the job gets an error frame saying why and is closed.
func (e *CollNetEndpoint) fail(j *cnJob, why string) {
	e.mu.Lock()
	if j.failed {
		e.mu.Unlock()
		return
	}
	j.failed = true
	delete(e.jobs, j.id)
	var ms []*cnMember
	for _, g := range j.groups {
		g.mu.Lock()
		for _, m := range g.members {
			if m != nil {
				ms = append(ms, m)
			}
		}
		g.mu.Unlock()
	}
	e.mu.Unlock()
	e.logf("collnet endpoint: job %#x failed: %s", j.id, why)
	for _, m := range ms {
		sendErr(m.conn, &m.wmu, why)
		m.conn.Close()
	}
}

// sendErr writes an error frame (best effort, within a second).
func sendErr(c net.Conn, mu *sync.Mutex, why string) {
	if len(why) > cnMaxErrMsg {
		why = why[:cnMaxErrMsg]
	}
	b := make([]byte, cnHdrBytes+len(why))
	putHdr(b, cnKindError, 0, 0, 0, len(why))
	copy(b[cnHdrBytes:], why)
	if mu != nil {
		mu.Lock()
		defer mu.Unlock()
	}
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.Write(b)
}

// OpOK reports whether the endpoint reduces op on dt (the operators on the wire: avg and
// PreMulSum travel as sum, see collnet.go).
func OpOK(dt kernels.Dtype, op kernels.Op) bool {
	switch dt {
	case kernels.Int32, kernels.Uint32, kernels.Int64, kernels.Uint64,
		kernels.Float16, kernels.Float32, kernels.Float64, kernels.Bfloat16:
		return op == kernels.Sum || op == kernels.Min || op == kernels.Max
	}
	return false
}

// check validates a data frame's header from member m; it returns why it is bad, or "".
func (g *cnGroup) check(m *cnMember, kind uint32, k Coll, dt kernels.Dtype, op kernels.Op, step uint64, nb int) string {
	part := nb // the per-node part of the step
	if k == ReduceScatter {
		part = nb / g.nNodes
	}
	switch {
	case kind != cnKindData:
		return fmt.Sprintf("frame kind %d (want data, %d, or bye, %d)", kind, cnKindData, cnKindBye)
	case step != m.next:
		return fmt.Sprintf("step %d, want %d (steps go in order)", step, m.next)
	case !Has(k):
		return fmt.Sprintf("step %d: collective %d, which the endpoint does not run", step, int(k))
	case !dt.Valid() || k != AllGather && !OpOK(dt, op):
		return fmt.Sprintf("step %d: %v with dtype %d op %d, which the endpoint does not reduce", step, k, int(dt), int(op))
	case nb <= 0 || part > g.maxStep || nb%dt.Size() != 0:
		return fmt.Sprintf("step %d: %v of %d bytes (want 1..%d per node, whole %v elements)", step, k, nb, g.maxStep, dt)
	case k == ReduceScatter && nb%(g.nNodes*dt.Size()) != 0:
		return fmt.Sprintf("step %d: ReduceScatter of %d bytes (want %d slices of whole %v elements)", step, nb, g.nNodes, dt)
	case k == AllGather && int64(nb)*int64(g.nNodes) > CollNetMaxFrame || nb > CollNetMaxFrame:
		return fmt.Sprintf("step %d: %v of %d bytes from each of %d nodes (frames are at most %d bytes)", step, k, nb, g.nNodes, CollNetMaxFrame)
	}
	return ""
}

// contribute adds member m's contribution to step; the last one of the step sends the result to
// every member. It returns why the contribution is bad, or "".
func (g *cnGroup) contribute(m *cnMember, k Coll, dt kernels.Dtype, op kernels.Op, step uint64, data []byte) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	m.next++
	sl := &g.slots[step%NCCLSteps]
	nb := len(data)
	accBytes := nb // AllGather gathers every node's nb bytes side by side
	if k == AllGather {
		accBytes = nb * g.nNodes
	}
	if len(sl.frame) < cnHdrBytes+accBytes {
		sl.frame = make([]byte, cnHdrBytes+max(accBytes, g.maxStep))
	}
	acc := sl.frame[cnHdrBytes : cnHdrBytes+accBytes]
	if sl.n > 0 {
		switch {
		case sl.step != step:
			return fmt.Sprintf("node %d sent step %d while step %d still holds its slot (more than %d steps outstanding)",
				m.node, step, sl.step, NCCLSteps)
		case sl.coll != k || sl.dt != dt || sl.op != op || sl.nb != nb:
			return fmt.Sprintf("step %d: node %d sent %v of %d bytes of %v %v, another node %v of %d bytes of %v %v",
				step, m.node, k, nb, dt, op, sl.coll, sl.nb, sl.dt, sl.op)
		}
	}
	if k == AllGather {
		if sl.n == 0 {
			sl.step, sl.coll, sl.dt, sl.op, sl.nb = step, k, dt, op, nb
		}
		copy(acc[m.node*nb:], data)
	} else if sl.n == 0 {
		if sl.dt != dt || sl.op != op || sl.red.NRanks() == 0 {
			red, err := kernels.NewReducer(dt, op, 1, nil)
			if err != nil {
				return fmt.Sprintf("node %d: step %d: %v", m.node, step, err)
			}
			sl.red = red
		}
		sl.step, sl.coll, sl.dt, sl.op, sl.nb = step, k, dt, op, nb
		copy(acc, data)
	} else {
		sl.red.Reduce(acc, acc, data)
	}
	if sl.n++; sl.n < g.nNodes {
		return ""
	}
	sl.n = 0
	hdr := g.hdr[:]
	for _, r := range g.members {
		if r == nil {
			return fmt.Sprintf("step %d complete with a node gone", step)
		}
		r.wmu.Lock()
		r.conn.SetWriteDeadline(time.Now().Add(IOTimeout))
		var err error
		if k == ReduceScatter { // node r's slice: its own header, then the slice
			part := nb / g.nNodes
			putHdr(hdr, cnKindData, 0, 0, step, part)
			if _, err = r.conn.Write(hdr); err == nil {
				_, err = r.conn.Write(acc[r.node*part : (r.node+1)*part])
			}
		} else { // AllReduce, AllGather: the whole accumulator, one write
			putHdr(sl.frame, cnKindData, 0, 0, step, len(acc))
			_, err = r.conn.Write(sl.frame[:cnHdrBytes+len(acc)])
		}
		r.wmu.Unlock()
		if err != nil {
			return fmt.Sprintf("step %d: sending the result to node %d: %v", step, r.node, err)
		}
	}
	return ""
}

// Link is a head's connection to the endpoint for one (channel, share): the client side of the
// protocol above, used by the one worker that heads the share on the channel, on its goroutine.
// It sends a step (Send) when it has a credit (SendReady: fewer than NCCL_STEPS steps sent and
// not consumed), and reads results itself while it polls for them (RecvReady), with
// non-blocking reads straight into NCCL_STEPS fixed result slots: a goroutine blocked in a read
// would wake only when the runtime polls the network, which a rank's spinning or yielding wait
// delays by milliseconds (Go's scheduler polls it when a P idles, or every 10 ms). A failed read
// or write (the endpoint died, or failed the job and said why in an error frame) aborts the
// communicator, so every wait of every rank ends; between calls nothing reads, so a failure is
// seen at the next call (a Launcher also aborts the job when the endpoint process exits).
type Link struct {
	ctl     *wire.Ctl // the rank's control words: a failure aborts the communicator
	addr    string
	conn    net.Conn
	rc      syscall.RawConn
	maxStep int
	nNodes  int
	buf     []byte            // a data frame: header, then the payload (grown to nNodes*maxStep at most)
	res     [NCCLSteps][]byte // grown like buf: an AllGather result is nNodes parts
	resLen  [NCCLSteps]int

	sent, consumed, arrived uint64 // steps sent, results consumed, results received

	// The frame being read: its header (hdrGot bytes of it so far), then its payload (payGot bytes
	// into res[arrived%NCCL_STEPS]).
	hdr            [cnHdrBytes]byte
	hdrGot, payGot int
	inPayload      bool

	// readSome's read, made once so that a poll allocates nothing: it reads into rbuf and leaves
	// the count and error in rn and rerr.
	readFn func(fd uintptr) bool
	rbuf   []byte
	rn     int
	rerr   error

	err error
}

// Dial connects a rank, whose control words are ctl, to the endpoint at addr as job's
// contributor of node on (ch, share).
func Dial(ctl *wire.Ctl, addr, job string, ch, share, node, nNodes, maxStep int) (*Link, error) {
	conn, err := net.DialTimeout("tcp", addr, IOTimeout)
	if err != nil {
		return nil, fmt.Errorf("engine: CollNet endpoint %s: %w", addr, err)
	}
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("engine: CollNet endpoint %s: not a TCP connection", addr)
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("engine: CollNet endpoint %s: %w", addr, err)
	}
	var hb [cnHelloBytes]byte
	cnHello{job: JobID(job), ch: uint32(ch), share: uint32(share), node: uint32(node),
		nNodes: uint32(nNodes), maxStep: uint32(maxStep)}.put(hb[:])
	conn.SetWriteDeadline(time.Now().Add(IOTimeout))
	if _, err := conn.Write(hb[:]); err != nil {
		conn.Close()
		return nil, fmt.Errorf("engine: CollNet endpoint %s: hello: %w", addr, err)
	}
	l := &Link{ctl: ctl, addr: addr, conn: conn, rc: rc, maxStep: maxStep, nNodes: nNodes, buf: make([]byte, cnHdrBytes+maxStep)}
	l.readFn = func(fd uintptr) bool {
		l.rn, l.rerr = syscall.Read(int(fd), l.rbuf)
		return true // never wait for the poller
	}
	for i := range l.res {
		l.res[i] = make([]byte, maxStep)
	}
	return l, nil
}

// Fail records the connection's failure and aborts the communicator.
func (l *Link) Fail(err error) {
	if l.err == nil {
		l.err = err
	}
	l.ctl.SetAbort(wire.AbortCollNet)
}

// readSome reads what the socket holds, without waiting, into b: the bytes read, 0 when none are
// there yet.
func (l *Link) readSome(b []byte) (int, error) {
	l.rbuf = b
	err := l.rc.Read(l.readFn)
	n, rerr := l.rn, l.rerr
	l.rbuf = nil
	if err != nil {
		return 0, err
	}
	switch {
	case rerr == syscall.EAGAIN || rerr == syscall.EINTR:
		return 0, nil
	case rerr != nil:
		return 0, rerr
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// poll reads the frames that have arrived (at most until one more result is in).
func (l *Link) poll() {
	if l.err != nil {
		return
	}
	addr := l.addr
	for {
		if !l.inPayload {
			n, err := l.readSome(l.hdr[l.hdrGot:])
			if err != nil {
				l.Fail(fmt.Errorf("engine: CollNet endpoint %s: connection lost: %w", addr, err))
				return
			}
			if n == 0 {
				return
			}
			if l.hdrGot += n; l.hdrGot < cnHdrBytes {
				continue
			}
			le := binary.LittleEndian
			kind, step, nb := le.Uint32(l.hdr[0:]), le.Uint64(l.hdr[8:]), int(le.Uint32(l.hdr[16:]))
			switch {
			case kind == cnKindError:
				msg := make([]byte, min(nb, cnMaxErrMsg))
				l.conn.SetReadDeadline(time.Now().Add(time.Second))
				io.ReadFull(l.conn, msg)
				l.Fail(fmt.Errorf("engine: CollNet endpoint %s failed the job: %s", addr, msg))
				return
			case kind != cnKindData:
				l.Fail(fmt.Errorf("engine: CollNet endpoint %s: frame kind %d", addr, kind))
				return
			case step != l.arrived || l.arrived-l.consumed >= NCCLSteps || l.arrived >= l.sent:
				l.Fail(fmt.Errorf("engine: CollNet endpoint %s: a result for step %d, want %d", addr, step, l.arrived))
				return
			case nb > l.maxFrame():
				l.Fail(fmt.Errorf("engine: CollNet endpoint %s: a result of %d bytes (results are at most %d)", addr, nb, l.maxFrame()))
				return
			}
			if i := step % NCCLSteps; len(l.res[i]) < nb {
				l.res[i] = make([]byte, nb)
			}
			l.resLen[step%NCCLSteps] = nb
			l.inPayload, l.payGot = true, 0
		}
		i := l.arrived % NCCLSteps
		if dst := l.res[i][:l.resLen[i]]; l.payGot < len(dst) {
			n, err := l.readSome(dst[l.payGot:])
			if err != nil {
				l.Fail(fmt.Errorf("engine: CollNet endpoint %s: connection lost: %w", addr, err))
				return
			}
			if n == 0 {
				return
			}
			if l.payGot += n; l.payGot < len(dst) {
				continue
			}
		}
		l.inPayload, l.hdrGot = false, 0
		l.arrived++
		return
	}
}

// SendReady reports whether the worker may send its next step (fewer than NCCL_STEPS outstanding).
func (l *Link) SendReady() bool { return l.sent-l.consumed < NCCLSteps }

// Sent is the number of steps sent on the connection.
func (l *Link) Sent() uint64 { return l.sent }

// maxFrame is the most payload bytes of a frame either way: nNodes parts of a step (an
// AllGather result, a ReduceScatter contribution), within CollNetMaxFrame.
func (l *Link) maxFrame() int { return min(l.nNodes*l.maxStep, CollNetMaxFrame) }

// Payload is where the next step's nb bytes go before send (nb at most nNodes steps: a
// ReduceScatter contribution).
func (l *Link) Payload(nb int) []byte {
	if len(l.buf) < cnHdrBytes+nb {
		l.buf = make([]byte, cnHdrBytes+min(nb, l.maxFrame()))
	}
	return l.buf[cnHdrBytes : cnHdrBytes+nb : cnHdrBytes+nb]
}

// Send sends the next step of collective k: nb bytes of payload (filled through Payload), reduced
// with op on dt (AllReduce, ReduceScatter). A failed write aborts the communicator (the next wait
// returns the abort).
func (l *Link) Send(k Coll, dt kernels.Dtype, op kernels.Op, nb int) {
	putHdrColl(l.buf, cnKindData, k, dt, op, l.sent, nb)
	l.sent++
	l.conn.SetWriteDeadline(time.Now().Add(IOTimeout))
	if _, err := l.conn.Write(l.buf[:cnHdrBytes+nb]); err != nil {
		l.Fail(fmt.Errorf("engine: CollNet endpoint %s: %w", l.addr, err))
	}
}

// RecvReady reports whether the oldest outstanding step's result is in, reading what has arrived.
func (l *Link) RecvReady() bool {
	if l.arrived == l.consumed && l.consumed < l.sent {
		l.poll()
	}
	return l.arrived > l.consumed
}

// Result is the oldest outstanding step's result (valid until release).
func (l *Link) Result() []byte {
	i := l.consumed % NCCLSteps
	return l.res[i][:l.resLen[i]]
}

// Release hands the oldest result's slot back.
func (l *Link) Release() { l.consumed++ }

// Close says goodbye and closes the connection.
func (l *Link) Close() {
	var b [cnHdrBytes]byte
	putHdr(b[:], cnKindBye, 0, 0, 0, 0)
	l.conn.SetWriteDeadline(time.Now().Add(closeWait))
	l.conn.Write(b[:])
	l.conn.Close()
}

// Err returns the connection's failure, if any.
func (l *Link) Err() error { return l.err }
