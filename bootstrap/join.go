package bootstrap

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Endpoint is what a rank tells the others about itself beyond its rank: the addresses
// (host:port) its data connections will listen on, the shared-memory job its node's ranks meet in
// (set by the node's local rank 0, which created it), and a digest of what every rank of the job
// must agree on (its configuration): Join refuses a job whose ranks' digests differ.
type Endpoint struct {
	Addrs  []string `json:"addrs"`
	Shm    string   `json:"shm,omitempty"`
	Digest string   `json:"digest,omitempty"`
}

// Record is one rank's entry in the Roster.
type Record struct {
	Rank      int      `json:"rank"`
	LocalRank int      `json:"local_rank"`
	LocalSize int      `json:"local_size"`
	Node      string   `json:"node"`
	Host      string   `json:"host"`
	Endpoint  Endpoint `json:"endpoint"`
}

// NodeRanks lists the ranks of one node, ascending: Ranks[i] has local rank i.
type NodeRanks struct {
	Node  string `json:"node"`
	Ranks []int  `json:"ranks"`
}

// Roster is what Join hands every rank: every rank's Record in rank order, and the ranks of each
// node (nodes in the order of their lowest rank), so that ranks on one host find each other for
// shared memory.
type Roster struct {
	Size    int         `json:"size"`
	Records []Record    `json:"records"`
	Nodes   []NodeRanks `json:"nodes"`
}

// Local returns the ranks on the node of rank, ascending.
func (r Roster) Local(rank int) []int {
	node := r.Records[rank].Node
	for _, n := range r.Nodes {
		if n.Node == node {
			return n.Ranks
		}
	}
	return nil
}

// wireRecord is a Record as a peer sends it: with its job size, and the job nonce it read from a
// rendezvous file ("" without one).
type wireRecord struct {
	Record
	Size  int    `json:"size"`
	Nonce string `json:"nonce"`
}

// waiting is rank 0's progress report to the ranks that have joined.
type waiting struct {
	Missing string `json:"missing"` // ranks as ranges: "3-5,9"
}

// rendezvousFile is what rank 0 publishes in a file rendezvous.
type rendezvousFile struct {
	Addr    string    `json:"addr"`
	Nonce   string    `json:"nonce"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Written time.Time `json:"written"`
}

// Tunables, variables so that tests can shorten them.
var (
	// handshakeTimeout bounds a connection's handshake and record at rank 0, so that a stranger
	// that connects and says nothing holds neither the listener nor a descriptor for long.
	handshakeTimeout = 3 * time.Second
	// progressEvery is how often rank 0 tells the joined ranks which are still missing.
	progressEvery = 200 * time.Millisecond
	// verdictLead is how long before the deadline rank 0 declares the missing ranks, so that its
	// verdict reaches ranks whose deadlines fall at about the same time (at most a tenth of the
	// time left when Join starts).
	verdictLead = 500 * time.Millisecond
	// fatalLinger is how long rank 0 stays to tell late ranks that the job has failed.
	fatalLinger = 2 * time.Second
	// retryMin and retryMax bound a peer's backoff between attempts to reach rank 0.
	retryMin, retryMax = 10 * time.Millisecond, 500 * time.Millisecond
)

const maxRecordFrame = 1 << 16

// logDrop logs a connection rank 0 dropped (a stranger, a failed proof, a malformed frame); a
// variable so that tests can see it.
var logDrop = func(remote string, err error) {
	slog.Default().Warn("bootstrap: dropped a connection to the rendezvous", "remote", remote, "err", err)
}

// Join brings the job's ranks together and returns the Roster (see the package comment for the
// protocol). Rank 0 listens on id.Rendezvous (or, with a file URL, on an ephemeral port it
// publishes in the file); every other rank connects, retrying with backoff until ctx ends,
// authenticates, and sends its Record (self: where its data connections will listen). Rank 0
// checks the records and sends every rank the Roster, or the same error. A rank that never
// arrives is an error naming it, on every rank that joined, by ctx's deadline.
func Join(ctx context.Context, id Identity, self Endpoint) (Roster, error) {
	if err := checkIdentity(id, self); err != nil {
		return Roster{}, err
	}
	rec := Record{Rank: id.Rank, LocalRank: id.LocalRank, LocalSize: id.LocalSize, Node: id.Node, Host: id.Host, Endpoint: self}
	if id.Size == 1 {
		return buildRoster(1, []Record{rec})
	}
	if id.Rank == 0 {
		return joinRoot(ctx, id, rec)
	}
	return joinPeer(ctx, id, rec)
}

func checkIdentity(id Identity, self Endpoint) error {
	switch {
	case id.Size < 1 || id.Rank < 0 || id.Rank >= id.Size:
		return fmt.Errorf("bootstrap: rank %d of %d", id.Rank, id.Size)
	case id.LocalSize < 1 || id.LocalSize > id.Size || id.LocalRank < 0 || id.LocalRank >= id.LocalSize:
		return fmt.Errorf("bootstrap: local rank %d of %d in a job of %d", id.LocalRank, id.LocalSize, id.Size)
	case id.Node == "":
		return errors.New("bootstrap: empty node id")
	case id.Secret != "" && len(id.Secret) < MinSecretLen:
		return fmt.Errorf("bootstrap: %s is %d bytes long, want at least %d", EnvSecret, len(id.Secret), MinSecretLen)
	}
	for _, a := range self.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("bootstrap: endpoint address %q: %v", a, err)
		}
	}
	if id.Size > 1 && id.Rendezvous == "" {
		return errors.New("bootstrap: no rendezvous address")
	}
	return nil
}

// loopback reports whether host is a loopback address or a name whose every address is one.
func loopback(ctx context.Context, host string) (bool, error) {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback(), nil
	}
	if host == "localhost" {
		return true, nil
	}
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return false, fmt.Errorf("bootstrap: resolving rendezvous host %q: %w", host, err)
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return false, nil
		}
	}
	return len(addrs) > 0, nil
}

// requireSecret refuses an off-loopback rendezvous without a job secret.
func requireSecret(ctx context.Context, id Identity, addr string) error {
	if id.Secret != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("bootstrap: rendezvous address %q: %v", addr, err)
	}
	lo, err := loopback(ctx, host)
	if err != nil {
		return err
	}
	if !lo {
		return fmt.Errorf("bootstrap: rendezvous at %s is off loopback: set %s (the same on every rank) so that strangers cannot join", addr, EnvSecret)
	}
	return nil
}

type arrival struct {
	rec  wireRecord
	conn net.Conn
}

func joinRoot(ctx context.Context, id Identity, own Record) (Roster, error) {
	file, isFile := id.IsFile()
	nonce := ""
	var ln net.Listener
	var err error
	var lc net.ListenConfig
	where := id.Rendezvous
	if isFile {
		nonce = hex.EncodeToString(newNonce()[:16])
		bind, publishHost := ":0", id.Host
		if id.LocalSize == id.Size {
			bind, publishHost = "127.0.0.1:0", "127.0.0.1"
		}
		if publishHost != "127.0.0.1" && id.Secret == "" {
			return Roster{}, fmt.Errorf("bootstrap: a file rendezvous for a job across hosts is off loopback: set %s (the same on every rank) so that strangers cannot join", EnvSecret)
		}
		if ln, err = lc.Listen(ctx, "tcp", bind); err != nil {
			return Roster{}, fmt.Errorf("bootstrap: rank 0 listening on %s: %w", bind, err)
		}
		defer ln.Close()
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		where = net.JoinHostPort(publishHost, port)
		if err := publish(file, rendezvousFile{Addr: where, Nonce: nonce, Host: id.Host, PID: os.Getpid(), Written: time.Now().UTC()}); err != nil {
			return Roster{}, err
		}
		defer unpublish(file, nonce)
	} else {
		if err := requireSecret(ctx, id, id.Rendezvous); err != nil {
			return Roster{}, err
		}
		host, port, _ := net.SplitHostPort(id.Rendezvous)
		bind := id.Rendezvous
		if lo, _ := loopback(ctx, host); !lo {
			bind = net.JoinHostPort("", port) // every interface: the name may resolve to 127.0.1.1 here
		}
		if ln, err = lc.Listen(ctx, "tcp", bind); err != nil {
			return Roster{}, fmt.Errorf("bootstrap: rank 0 listening on %s (from %s): %w", bind, id.RendezvousFrom, err)
		}
		defer ln.Close()
	}

	done := make(chan struct{})
	// final is the frame a connection still being admitted gets once the main loop is done: the
	// job's verdict, or a refusal once the roster is out. Set before done is closed.
	var final []byte
	arrivals := make(chan arrival)
	var wg sync.WaitGroup
	// The connections still in their handshakes: closed when Join ends, so that a stranger that
	// says nothing cannot make rank 0 wait out its handshake deadline.
	var mu sync.Mutex
	pending := map[net.Conn]bool{}
	closing := false
	defer func() {
		close(done)
		ln.Close()
		mu.Lock()
		closing = true
		for c := range pending {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				// Out of descriptors (many strangers at once) or an aborted connection: the
				// listener still serves the ranks once that passes.
				logDrop(ln.Addr().String(), fmt.Errorf("accepting: %w", err))
				time.Sleep(10 * time.Millisecond)
				continue
			}
			mu.Lock()
			if closing {
				mu.Unlock()
				c.Close()
				return
			}
			pending[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec, err := admit(c, id, nonce)
				mu.Lock()
				delete(pending, c)
				mu.Unlock()
				if err != nil {
					if !errors.Is(err, net.ErrClosed) { // (not closed by Join's end)
						logDrop(c.RemoteAddr().String(), err)
					}
					c.Close()
					return
				}
				select {
				case arrivals <- arrival{rec, c}:
				case <-done:
					c.SetWriteDeadline(time.Now().Add(time.Second))
					c.Write(final)
					c.Close()
				}
			}()
		}
	}()

	start := time.Now()
	records := make([]Record, id.Size)
	records[0] = own
	conns := make([]net.Conn, id.Size)
	var extra []net.Conn // a second connection claiming a rank: it hears the verdict too
	defer func() {
		for _, c := range append(conns, extra...) {
			if c != nil {
				c.Close()
			}
		}
	}()
	joined := 1
	var verdict <-chan time.Time
	if deadline, ok := ctx.Deadline(); ok {
		lead := min(verdictLead, time.Until(deadline)/10)
		t := time.NewTimer(time.Until(deadline) - lead)
		defer t.Stop()
		verdict = t.C
	}
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	reported := ""
	missing := func() string {
		var m []int
		for r := 1; r < id.Size; r++ {
			if conns[r] == nil {
				m = append(m, r)
			}
		}
		return rankRanges(m)
	}
	var fatal string
	for joined < id.Size && fatal == "" {
		select {
		case a := <-arrivals:
			r := a.rec.Rank
			switch {
			case a.rec.Size != id.Size:
				extra = append(extra, a.conn)
				fatal = fmt.Sprintf("rank %d was started for %d ranks, rank 0 for %d", r, a.rec.Size, id.Size)
			case conns[r] != nil:
				extra = append(extra, a.conn)
				fatal = fmt.Sprintf("rank %d joined twice (from %s and %s)", r, conns[r].RemoteAddr(), a.conn.RemoteAddr())
			default:
				conns[r], records[r] = a.conn, a.rec.Record
				joined++
			}
		case <-tick.C:
			if m := missing(); m != reported {
				broadcast(conns, frameWaiting, mustJSON(waiting{Missing: m}))
				reported = m
			}
		case <-verdict:
			fatal = fmt.Sprintf("ranks %s did not join the rendezvous at %s within %v", missing(), where, time.Since(start).Round(time.Millisecond))
		case <-ctx.Done():
			fatal = fmt.Sprintf("ranks %s did not join the rendezvous at %s before rank 0's context ended (%v)", missing(), where, ctx.Err())
		}
	}
	var roster Roster
	if fatal == "" {
		if roster, err = buildRoster(id.Size, records); err != nil {
			fatal = strings.TrimPrefix(err.Error(), "bootstrap: ")
		}
	}
	if fatal != "" {
		final = appendFrame(nil, frameFatal, []byte(fatal))
		broadcast(append(conns, extra...), frameFatal, []byte(fatal))
		lingerFatal(ctx, id.Size, conns, arrivals, final)
		return Roster{}, &RemoteError{Msg: fatal, Fatal: true}
	}
	final = appendFrame(nil, frameRejected, []byte("the job has started without this connection"))
	broadcast(conns, frameRoster, mustJSON(roster))
	return roster, nil
}

// lingerFatal tells the ranks that arrive after a verdict against the job (conns: those already
// told) the same verdict, for at most fatalLinger and not past ctx: without it they would retry
// until their deadlines without knowing why.
func lingerFatal(ctx context.Context, size int, conns []net.Conn, arrivals <-chan arrival, final []byte) {
	told := make([]bool, size)
	untold := size - 1
	for r, c := range conns {
		if r > 0 && c != nil {
			told[r] = true
			untold--
		}
	}
	t := time.NewTimer(fatalLinger)
	defer t.Stop()
	for untold > 0 {
		select {
		case a := <-arrivals:
			a.conn.SetWriteDeadline(time.Now().Add(time.Second))
			a.conn.Write(final)
			a.conn.Close()
			if r := a.rec.Rank; r > 0 && r < size && !told[r] {
				told[r] = true
				untold--
			}
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// admit runs rank 0's side of one connection up to its record, within handshakeTimeout. A
// connection refused here does not affect the job.
func admit(c net.Conn, id Identity, nonce string) (wireRecord, error) {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := rootHandshake(c, id.Secret); err != nil {
		return wireRecord{}, err
	}
	p, err := expect(c, maxRecordFrame, frameRecord)
	if err != nil {
		return wireRecord{}, err
	}
	var rec wireRecord
	if err := strictJSON(p, &rec); err != nil {
		return wireRecord{}, fmt.Errorf("%w: record: %v", ErrFrame, err)
	}
	reject := func(format string, args ...any) (wireRecord, error) {
		msg := fmt.Sprintf(format, args...)
		writeFrame(c, frameRejected, []byte(msg))
		return wireRecord{}, errors.New(msg)
	}
	if rec.Nonce != nonce {
		return reject("job nonce %q is not this job's: the rendezvous file it was read from is stale", rec.Nonce)
	}
	if rec.Size == id.Size && (rec.Rank < 1 || rec.Rank >= id.Size) {
		return reject("rank %d is not a peer rank of this job of %d ranks", rec.Rank, id.Size)
	}
	// A record for another size goes on to the main loop, which fails the job: every rank must
	// be started for the same size.
	c.SetDeadline(time.Time{})
	return rec, nil
}

// broadcast sends one frame to every connected rank, each write bounded by a second.
func broadcast(conns []net.Conn, typ byte, payload []byte) {
	b := appendFrame(nil, typ, payload)
	for _, c := range conns {
		if c != nil {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			c.Write(b)
		}
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs of strings and ints always marshal
	}
	return b
}

func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data")
	}
	return nil
}

// rankRanges writes ascending ranks as ranges: 3,4,5,9 is "3-5,9".
func rankRanges(ranks []int) string {
	var b strings.Builder
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ranks[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(ranks[j]))
		}
		i = j + 1
	}
	return b.String()
}

// buildRoster checks that records (indexed by rank, each present) are consistent with their
// nodes: on each node the local ranks are 0..k-1, each once, and every rank says its node has k;
// and that every rank's digest is rank 0's.
func buildRoster(size int, records []Record) (Roster, error) {
	r := Roster{Size: size, Records: records}
	for _, rec := range records[1:] {
		if d0 := records[0].Endpoint.Digest; rec.Endpoint.Digest != d0 {
			return Roster{}, fmt.Errorf("bootstrap: rank %d's configuration digest %q differs from rank 0's %q: every rank of a job must be started with the same configuration", rec.Rank, rec.Endpoint.Digest, d0)
		}
	}
	index := map[string]int{}
	for _, rec := range records {
		i, ok := index[rec.Node]
		if !ok {
			i = len(r.Nodes)
			index[rec.Node] = i
			r.Nodes = append(r.Nodes, NodeRanks{Node: rec.Node})
		}
		r.Nodes[i].Ranks = append(r.Nodes[i].Ranks, rec.Rank)
	}
	for i, n := range r.Nodes {
		k := len(n.Ranks)
		byLocal := make([]int, k)
		for j := range byLocal {
			byLocal[j] = -1
		}
		for _, rank := range n.Ranks {
			rec := records[rank]
			switch {
			case rec.LocalSize != k:
				return Roster{}, fmt.Errorf("bootstrap: node %q has %d ranks (%s) but rank %d says it has %d", n.Node, k, rankRanges(n.Ranks), rank, rec.LocalSize)
			case rec.LocalRank >= k:
				return Roster{}, fmt.Errorf("bootstrap: rank %d has local rank %d on node %q of %d ranks", rank, rec.LocalRank, n.Node, k)
			case byLocal[rec.LocalRank] >= 0:
				return Roster{}, fmt.Errorf("bootstrap: ranks %d and %d both have local rank %d on node %q", byLocal[rec.LocalRank], rank, rec.LocalRank, n.Node)
			}
			byLocal[rec.LocalRank] = rank
		}
		r.Nodes[i].Ranks = byLocal
	}
	return r, nil
}

// publish writes rank 0's address to a rendezvous file atomically (a temporary file renamed over
// it), so that no rank reads half of it.
func publish(path string, f rendezvousFile) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("bootstrap: publishing rank 0's address in %s: %w", path, err)
	}
	_, err = tmp.Write(append(mustJSON(f), '\n'))
	if err == nil {
		err = tmp.Close()
	} else {
		tmp.Close()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("bootstrap: publishing rank 0's address in %s: %w", path, err)
	}
	return nil
}

// unpublish removes the rendezvous file if it is still this job's.
func unpublish(path, nonce string) {
	if f, err := readRendezvousFile(path); err == nil && f.Nonce == nonce {
		os.Remove(path)
	}
}

func readRendezvousFile(path string) (rendezvousFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return rendezvousFile{}, err
	}
	var f rendezvousFile
	if err := strictJSON(b, &f); err != nil {
		return rendezvousFile{}, fmt.Errorf("%s is not a rendezvous file: %v", path, err)
	}
	if _, _, err := net.SplitHostPort(f.Addr); err != nil || f.Nonce == "" {
		return rendezvousFile{}, fmt.Errorf("%s is not a rendezvous file: address %q, nonce %q", path, f.Addr, f.Nonce)
	}
	return f, nil
}

// attemptError is why one attempt to reach rank 0 failed; retry is false when trying again
// cannot help.
type attemptError struct {
	err   error
	retry bool
	stale bool // the address came from a file and did not answer as this job's rank 0
}

func joinPeer(ctx context.Context, id Identity, own Record) (Roster, error) {
	file, isFile := id.IsFile()
	if !isFile {
		if err := requireSecret(ctx, id, id.Rendezvous); err != nil {
			return Roster{}, err
		}
	}
	start := time.Now()
	backoff := retryMin
	var last attemptError
	var lastFile rendezvousFile
	for {
		addr, nonce := id.Rendezvous, ""
		var a *attemptError
		if isFile {
			f, err := readRendezvousFile(file)
			switch {
			case errors.Is(err, os.ErrNotExist):
				a = &attemptError{err: fmt.Errorf("rank 0 has not published its address in %s", file), retry: true}
			case err != nil:
				a = &attemptError{err: err, retry: true}
			default:
				lastFile, addr, nonce = f, f.Addr, f.Nonce
				if err := requireSecret(ctx, id, addr); err != nil {
					return Roster{}, err
				}
			}
		}
		if a == nil {
			roster, err := attempt(ctx, id, own, addr, nonce)
			if err == nil {
				return roster, nil
			}
			a = err
			a.stale = isFile && a.retry
		}
		if !a.retry {
			return Roster{}, a.err
		}
		if ctx.Err() == nil || last.err == nil {
			last = *a // (an attempt cut short by the deadline says less than the one before it)
		}
		select {
		case <-ctx.Done():
			elapsed := time.Since(start).Round(time.Millisecond)
			if last.stale {
				return Roster{}, fmt.Errorf("bootstrap: rank %d: rendezvous file %s names rank 0 at %s (written %s by pid %d on %s), which did not answer as this job's rank 0 within %v (%v): the file is stale, from an earlier job; %s's file must be fresh for each job",
					id.Rank, file, lastFile.Addr, lastFile.Written.Format(time.RFC3339), lastFile.PID, lastFile.Host, elapsed, last.err, EnvInit)
			}
			return Roster{}, fmt.Errorf("bootstrap: rank %d could not reach rank 0 within %v: rank 0 did not join (last: %v)", id.Rank, elapsed, last.err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, retryMax)
	}
}

// attempt makes one connection to rank 0 at addr and, once its record is accepted, waits there
// for the Roster.
func attempt(ctx context.Context, id Identity, own Record, addr, nonce string) (Roster, *attemptError) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return Roster{}, &attemptError{err: err, retry: true}
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := peerHandshake(c, id.Secret); err != nil {
		return Roster{}, &attemptError{err: fmt.Errorf("rank 0 at %s: %w", addr, err), retry: true}
	}
	rec := wireRecord{Record: own, Size: id.Size, Nonce: nonce}
	if err := writeFrame(c, frameRecord, mustJSON(rec)); err != nil {
		return Roster{}, &attemptError{err: fmt.Errorf("rank 0 at %s: %w", addr, err), retry: true}
	}
	c.SetDeadline(time.Time{})
	missing := ""
	for {
		f, err := readFrame(c, maxRosterFrame)
		if err != nil {
			if ctx.Err() != nil {
				report := "rank 0 had not reported which ranks are missing"
				if missing != "" {
					report = "rank 0 last reported ranks " + missing + " missing"
				}
				return Roster{}, &attemptError{err: fmt.Errorf("bootstrap: rank %d: rank 0 at %s had not sent the roster when the context ended (%v): %s", id.Rank, addr, ctx.Err(), report)}
			}
			return Roster{}, &attemptError{err: fmt.Errorf("bootstrap: rank %d: rank 0 at %s accepted this rank's record, then: %w (did rank 0 exit?)", id.Rank, addr, err)}
		}
		switch f.typ {
		case frameWaiting:
			var w waiting
			if err := strictJSON(f.payload, &w); err != nil {
				return Roster{}, &attemptError{err: fmt.Errorf("bootstrap: rank %d: rank 0's progress report: %w: %v", id.Rank, ErrFrame, err)}
			}
			missing = w.Missing
		case frameRoster:
			var r Roster
			if err := strictJSON(f.payload, &r); err != nil {
				return Roster{}, &attemptError{err: fmt.Errorf("bootstrap: rank %d: roster: %w: %v", id.Rank, ErrFrame, err)}
			}
			if err := checkRoster(r, id, own); err != nil {
				return Roster{}, &attemptError{err: err}
			}
			return r, nil
		case frameRejected:
			return Roster{}, &attemptError{err: &RemoteError{Msg: string(f.payload)}, retry: true}
		case frameFatal:
			return Roster{}, &attemptError{err: &RemoteError{Msg: string(f.payload), Fatal: true}}
		default:
			return Roster{}, &attemptError{err: fmt.Errorf("bootstrap: rank %d: rank 0 sent %w: type %q after the record", id.Rank, ErrFrame, f.typ)}
		}
	}
}

// checkRoster checks rank 0's Roster against this rank's own view.
func checkRoster(r Roster, id Identity, own Record) error {
	if r.Size != id.Size || len(r.Records) != id.Size {
		return fmt.Errorf("bootstrap: rank %d: rank 0 sent a roster of %d records for %d ranks, want %d", id.Rank, len(r.Records), r.Size, id.Size)
	}
	for i, rec := range r.Records {
		if rec.Rank != i {
			return fmt.Errorf("bootstrap: rank %d: roster entry %d is rank %d", id.Rank, i, rec.Rank)
		}
	}
	if got := r.Records[id.Rank]; got.Node != own.Node || got.LocalRank != own.LocalRank || !slices.Equal(got.Endpoint.Addrs, own.Endpoint.Addrs) ||
		got.Endpoint.Shm != own.Endpoint.Shm || got.Endpoint.Digest != own.Endpoint.Digest {
		return fmt.Errorf("bootstrap: rank %d: rank 0's roster has %+v for this rank, which sent %+v", id.Rank, got, own)
	}
	if _, err := buildRoster(r.Size, r.Records); err != nil {
		return err
	}
	return nil
}
