package shimtable

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strings"

	"github.com/collplan/collplan/costmodel"
)

var le = binary.LittleEndian

// checksumFrom is where the checksum starts: right after its own field, so that it covers the rest
// of the header (block count, K, flags, constants offset, name) too.
const checksumFrom = 32

// Checksum is the file's FNV-1a 64 over bytes [32, end).
func Checksum(file []byte) uint64 {
	h := fnv.New64a()
	if len(file) > checksumFrom {
		h.Write(file[checksumFrom:])
	}
	return h.Sum64()
}

// Encode writes the table in the format of docs/tuner-table.md.
func (t *Table) Encode() ([]byte, error) {
	if t.K < 1 || t.K > 8 {
		return nil, fmt.Errorf("shimtable: K %d out of range [1, 8]", t.K)
	}
	buf := make([]byte, headerBytes+blockBytes*len(t.Blocks))
	align := func() {
		for len(buf)%8 != 0 {
			buf = append(buf, 0)
		}
	}
	if len(t.Named) > 0 {
		buf = le.AppendUint32(buf, uint32(len(t.Named)))
		buf = le.AppendUint32(buf, 0)
		for _, n := range t.Named {
			if len(n.Comm) == 0 || len(n.Comm) > MaxCommPattern || strings.IndexByte(n.Comm, 0) >= 0 {
				return nil, fmt.Errorf("shimtable: communicator pattern %q: want 1..%d bytes and no NUL", n.Comm, MaxCommPattern)
			}
			if n.Block < 0 || n.Block >= len(t.Blocks) {
				return nil, fmt.Errorf("shimtable: communicator pattern %q: block %d of %d", n.Comm, n.Block, len(t.Blocks))
			}
			var e [namedBytes]byte
			copy(e[:], n.Comm)
			le.PutUint32(e[64:], uint32(n.Block))
			buf = append(buf, e[:]...)
		}
	}
	if !t.Release.IsZero() {
		code, err := releaseCode(t.Release)
		if err != nil {
			return nil, err
		}
		buf = le.AppendUint32(buf, code)
		buf = le.AppendUint32(buf, 0)
	}
	u32 := func(off int, v int) error {
		if v < 0 || int64(v) > math.MaxUint32 {
			return fmt.Errorf("shimtable: value %d does not fit the format", v)
		}
		le.PutUint32(buf[off:], uint32(v))
		return nil
	}
	for bi, b := range t.Blocks {
		nPipe := b.MaxPipeOps - b.MinPipeOps + 1
		if len(b.Classes) != 5 || nPipe < 1 {
			return nil, fmt.Errorf("shimtable: block %d: want 5 collectives and a pipe-op range", bi)
		}
		align()
		dir := len(buf)
		buf = append(buf, make([]byte, classBytes*5*nPipe)...)
		be := headerBytes + blockBytes*bi
		for i, v := range []int{b.NNodes, b.NRanks, b.MinPipeOps, b.MaxPipeOps, dir, b.NVLDomains, b.MinRanksPerNVL, b.MaxRanksPerNVL} {
			if err := u32(be+4*i, v); err != nil {
				return nil, err
			}
		}
		for c := 0; c < 5; c++ {
			if len(b.Classes[c]) != nPipe {
				return nil, fmt.Errorf("shimtable: block %d coll %d: %d pipe-op classes, want %d", bi, c, len(b.Classes[c]), nPipe)
			}
			for p, cl := range b.Classes[c] {
				n := len(cl.Starts)
				if n == 0 || n != len(cl.Plans) || cl.Starts[0] != 0 {
					return nil, fmt.Errorf("shimtable: block %d coll %d pipe %d: bad intervals", bi, c, p+b.MinPipeOps)
				}
				align()
				starts := len(buf)
				for i, s := range cl.Starts {
					if i > 0 && s <= cl.Starts[i-1] {
						return nil, fmt.Errorf("shimtable: block %d coll %d: starts not increasing", bi, c)
					}
					buf = le.AppendUint64(buf, uint64(s))
				}
				plans := len(buf)
				for _, ps := range cl.Plans {
					if len(ps) > t.K {
						return nil, fmt.Errorf("shimtable: %d plans in an interval, K is %d", len(ps), t.K)
					}
					for j := 0; j < t.K; j++ {
						if j >= len(ps) {
							buf = append(buf, noAlgo, 0, 0, 0, 0, 0, 0, 0)
							continue
						}
						pl := ps[j]
						if pl.Algo < 0 || pl.Algo > 6 || pl.Proto < 0 || pl.Proto > 2 || pl.Channels < 0 || pl.Channels > math.MaxUint16 || pl.Chunk < 0 || pl.Chunk > math.MaxUint32 {
							return nil, fmt.Errorf("shimtable: plan %+v out of range", pl)
						}
						buf = append(buf, byte(pl.Algo), byte(pl.Proto))
						buf = le.AppendUint16(buf, uint16(pl.Channels))
						buf = le.AppendUint32(buf, uint32(pl.Chunk))
					}
				}
				e := dir + classBytes*(c*nPipe+p)
				for i, v := range []int{n, starts, plans} {
					if err := u32(e+4*i, v); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	consts := 0
	if t.Constants != nil {
		align()
		consts = len(buf)
		for _, v := range t.Constants {
			buf = le.AppendUint64(buf, math.Float64bits(v))
		}
	}
	copy(buf[0:8], Magic)
	le.PutUint32(buf[8:], Version)
	le.PutUint32(buf[12:], headerBytes)
	le.PutUint64(buf[16:], uint64(len(buf)))
	le.PutUint32(buf[32:], uint32(len(t.Blocks)))
	le.PutUint32(buf[36:], uint32(t.K))
	flags := uint32(0)
	if t.Constants != nil {
		flags |= 1
	}
	if len(t.Named) > 0 {
		flags |= flagNamed
	}
	if !t.Release.IsZero() {
		flags |= flagRelease
	}
	le.PutUint32(buf[40:], flags)
	if err := u32(44, consts); err != nil {
		return nil, err
	}
	copy(buf[48:64], t.Name)
	le.PutUint64(buf[24:], Checksum(buf))
	return buf, nil
}

// ErrNotTable says the data is not a collplan tuner table at all.
var ErrNotTable = errors.New("shimtable: not a collplan tuner table")

// Decode reads and fully validates a table (every check of docs/tuner-table.md).
func Decode(data []byte) (*Table, error) {
	if len(data) < headerBytes {
		if looksLikeCSV(data) {
			return nil, fmt.Errorf("%w: it looks like an NCCL example-tuner CSV", ErrNotTable)
		}
		return nil, fmt.Errorf("shimtable: truncated: %d bytes, the header alone is %d", len(data), headerBytes)
	}
	if string(data[:8]) != Magic {
		if looksLikeCSV(data) {
			return nil, fmt.Errorf("%w: it looks like an NCCL example-tuner CSV", ErrNotTable)
		}
		return nil, fmt.Errorf("%w: bad magic %q", ErrNotTable, data[:8])
	}
	if v := le.Uint32(data[8:]); v != Version {
		return nil, fmt.Errorf("shimtable: version %d, this reader knows %d", v, Version)
	}
	if le.Uint32(data[12:]) != headerBytes {
		return nil, fmt.Errorf("shimtable: header size %d, want %d", le.Uint32(data[12:]), headerBytes)
	}
	if n := le.Uint64(data[16:]); n != uint64(len(data)) {
		return nil, fmt.Errorf("shimtable: truncated or padded: header says %d bytes, have %d", n, len(data))
	}
	if sum := le.Uint64(data[24:]); sum != Checksum(data) {
		return nil, fmt.Errorf("shimtable: checksum %016x, content hashes to %016x", sum, Checksum(data))
	}
	t := &Table{K: int(le.Uint32(data[36:])), Name: strings.TrimRight(string(data[48:64]), "\x00")}
	if t.K < 1 || t.K > 8 {
		return nil, fmt.Errorf("shimtable: K %d out of range", t.K)
	}
	nBlocks := int(le.Uint32(data[32:]))
	in := func(off, size uint64) bool { return off <= uint64(len(data)) && size <= uint64(len(data))-off }
	if !in(headerBytes, uint64(nBlocks)*blockBytes) {
		return nil, fmt.Errorf("shimtable: %d blocks overrun the file", nBlocks)
	}
	flags := le.Uint32(data[40:])
	if flags&^uint32(1|flagNamed|flagRelease) != 0 {
		return nil, fmt.Errorf("shimtable: unknown flags %#x", flags)
	}
	ext := uint64(headerBytes + blockBytes*nBlocks) // the optional sections, in flag order
	if flags&flagNamed != 0 {
		off := ext
		if !in(off, 8) {
			return nil, fmt.Errorf("shimtable: named-communicator section outside the file")
		}
		n := uint64(le.Uint32(data[off:]))
		if n == 0 || le.Uint32(data[off+4:]) != 0 || !in(off+8, n*namedBytes) {
			return nil, fmt.Errorf("shimtable: named-communicator section: %d entries, or reserved field set, or outside the file", n)
		}
		for i := uint64(0); i < n; i++ {
			e := data[off+8+i*namedBytes:]
			name, _, ok := bytes.Cut(e[:64], []byte{0})
			blk := int(le.Uint32(e[64:]))
			if !ok || len(name) == 0 || blk >= nBlocks || le.Uint32(e[68:]) != 0 {
				return nil, fmt.Errorf("shimtable: named-communicator entry %d: empty or unterminated pattern, block %d of %d, or reserved field set", i, blk, nBlocks)
			}
			t.Named = append(t.Named, Named{Comm: string(name), Block: blk})
		}
		ext = off + 8 + n*namedBytes
	}
	if flags&flagRelease != 0 {
		if !in(ext, 8) || le.Uint32(data[ext+4:]) != 0 {
			return nil, fmt.Errorf("shimtable: release record outside the file or its reserved field set")
		}
		r, err := releaseFromCode(le.Uint32(data[ext:]))
		if err != nil {
			return nil, err
		}
		t.Release = r
	}
	for bi := 0; bi < nBlocks; bi++ {
		e := data[headerBytes+blockBytes*bi:]
		f := func(i int) int { return int(le.Uint32(e[4*i:])) }
		b := Block{NNodes: f(0), NRanks: f(1), MinPipeOps: f(2), MaxPipeOps: f(3), NVLDomains: f(5), MinRanksPerNVL: f(6), MaxRanksPerNVL: f(7)}
		dir := uint64(f(4))
		if b.MinPipeOps < 1 || b.MaxPipeOps < b.MinPipeOps || b.MaxPipeOps > 64 {
			return nil, fmt.Errorf("shimtable: block %d: pipe ops %d..%d", bi, b.MinPipeOps, b.MaxPipeOps)
		}
		nPipe := b.MaxPipeOps - b.MinPipeOps + 1
		if !in(dir, uint64(5*nPipe*classBytes)) {
			return nil, fmt.Errorf("shimtable: block %d: class directory outside the file", bi)
		}
		b.Classes = make([][]Class, 5)
		for c := 0; c < 5; c++ {
			for p := 0; p < nPipe; p++ {
				ce := data[dir+uint64(classBytes*(c*nPipe+p)):]
				n, so, po := uint64(le.Uint32(ce)), uint64(le.Uint32(ce[4:])), uint64(le.Uint32(ce[8:]))
				if n == 0 || !in(so, n*8) || !in(po, n*uint64(t.K)*planBytes) {
					return nil, fmt.Errorf("shimtable: block %d coll %d pipe %d: intervals outside the file", bi, c, p+b.MinPipeOps)
				}
				cl := Class{Starts: make([]int64, n), Plans: make([][]Plan, n)}
				for i := uint64(0); i < n; i++ {
					s := le.Uint64(data[so+8*i:])
					if (i == 0 && s != 0) || (i > 0 && int64(s) <= cl.Starts[i-1]) || s > math.MaxInt64 {
						return nil, fmt.Errorf("shimtable: block %d coll %d: interval starts not increasing from 0", bi, c)
					}
					cl.Starts[i] = int64(s)
					for j := 0; j < t.K; j++ {
						pe := data[po+(i*uint64(t.K)+uint64(j))*planBytes:]
						if pe[0] == noAlgo {
							break
						}
						if pe[0] > 6 || pe[1] > 2 {
							return nil, fmt.Errorf("shimtable: block %d coll %d: plan algo %d proto %d out of range", bi, c, pe[0], pe[1])
						}
						cl.Plans[i] = append(cl.Plans[i], Plan{Algo: int(pe[0]), Proto: int(pe[1]),
							Channels: int(le.Uint16(pe[2:])), Chunk: int64(le.Uint32(pe[4:]))})
					}
				}
				b.Classes[c] = append(b.Classes[c], cl)
			}
		}
		t.Blocks = append(t.Blocks, b)
	}
	if flags&1 != 0 {
		off := uint64(le.Uint32(data[44:]))
		if !in(off, NumConstants*8) {
			return nil, fmt.Errorf("shimtable: constants outside the file")
		}
		var c [NumConstants]float64
		for i := range c {
			c[i] = math.Float64frombits(le.Uint64(data[off+8*uint64(i):]))
		}
		t.Constants = &c
	}
	return t, nil
}

// looksLikeCSV recognises NCCL's example-tuner config: text lines of 8 to 10 comma-separated fields
// starting with a collective name, or comments.
func looksLikeCSV(data []byte) bool {
	for _, line := range bytes.Split(data, []byte("\n")) {
		l := strings.TrimSpace(string(line))
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Split(l, ",")
		if len(f) < 8 || len(f) > 10 {
			return false
		}
		switch strings.ToLower(strings.TrimSpace(f[0])) {
		case "broadcast", "reduce", "allgather", "reducescatter", "allreduce":
			return true
		}
		return false
	}
	return false
}

// releaseCode is a release as the file records it: master<<31 | major<<16 | minor<<8 | patch.
func releaseCode(r costmodel.Release) (uint32, error) {
	if r.Major < 1 || r.Major > 0x7FFF || r.Minor < 0 || r.Minor > 255 || r.Patch < 0 || r.Patch > 255 {
		return 0, fmt.Errorf("shimtable: release %s does not fit the file's record", r)
	}
	c := uint32(r.Major)<<16 | uint32(r.Minor)<<8 | uint32(r.Patch)
	if r.Master {
		c |= 1 << 31
	}
	return c, nil
}

// releaseFromCode reads a release record, which must name a release ParseRelease accepts.
func releaseFromCode(c uint32) (costmodel.Release, error) {
	r := costmodel.Release{Major: int(c >> 16 & 0x7FFF), Minor: int(c >> 8 & 0xFF), Patch: int(c & 0xFF), Master: c>>31 != 0}
	if _, err := costmodel.ParseRelease(fmt.Sprintf("%d.%d.%d", r.Major, r.Minor, r.Patch)); err != nil {
		return r, fmt.Errorf("shimtable: release record %#x: %w", c, err)
	}
	return r, nil
}
