package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/collplan/collplan/internal/bytesize"
)

// Limits checked before any rank starts, so that a request the host cannot serve is one clear
// line (exit 2), not minutes of process starts (-np 100000 started 9,436 processes before it was
// stopped) or an out-of-memory kill in the middle of a sweep.

// ranksPerCore and minMaxRanks make the default -np limit: 8 ranks per core, at least 16. Past a
// few ranks per core the engine's timings measure the scheduler, not the collective (on this
// project's 2-core host 4 ranks already take 2-2.5x the time of 2 per call at small sizes,
// docs/engine-vs-mpi.md); --max-np raises the limit for whoever wants that anyway.
const (
	ranksPerCore = 8
	minMaxRanks  = 16
)

// rankBaseBytes is a rank's memory besides its user buffers: its Go runtime and code (a rank
// process measured 26 MiB resident with 2 MiB of buffers, 2 ranks, 1 channel, on this project's
// host) and its share of the connection regions, which estimate adds per channel.
const rankBaseBytes = 32 << 20

// rankNeed is one rank's memory estimate for the sweep: its largest send and receive buffers over
// the sweep's types, plus rankBaseBytes and its connection regions (two per channel, each the
// three protocols' buffers).
func (o *options) rankNeed(n int) (buffers, total int64) {
	b := &bench{o: o, n: n}
	for _, dt := range o.dtNames {
		b.es = dtypes[dt].Size()
		s, r := b.bufBytes(o.maxBytes)
		buffers = max(buffers, s+r)
	}
	bufs := o.buffers.WithDefaults()
	channels := int64(max(o.channels, 2))
	return buffers, buffers + rankBaseBytes + 2*channels*(bufs.LL+bufs.LL128+bufs.Simple)
}

// checkLimits refuses a job of n ranks that is above the rank limit (when this process starts its
// ranks: starts) or whose buffers cannot fit in the memory available to the ranks it runs here
// (all n when it starts them, this one rank of a job some other launcher started).
func (o *options) checkLimits(n int, starts bool) error {
	buffers, per := o.rankNeed(n)
	avail, haveMem := memAvailable()
	here := 1
	if starts && (!haveMem || per <= avail) {
		here = n
		limit, why := o.maxNP, "--max-np"
		if limit == 0 {
			cores := runtime.NumCPU()
			limit = max(minMaxRanks, ranksPerCore*cores)
			why = fmt.Sprintf("%d per core on %d cores, at least %d", ranksPerCore, cores, minMaxRanks)
			if haveMem && avail/per < int64(limit) {
				limit = int(max(1, avail/per))
				why = fmt.Sprintf("what %s of available memory holds at about %s per rank", bytesize.Approx(avail), bytesize.Approx(per))
			}
		}
		if n > limit {
			return usagef("-np %d: above this host's limit of %d ranks (%s); --max-np N raises it", n, limit, why)
		}
	}
	if !haveMem {
		return nil
	}
	if starts {
		here = n
	}
	if need := int64(here) * per; need > avail {
		ranks := "1 rank"
		if here != 1 {
			ranks = fmt.Sprintf("%d ranks", here)
		}
		return usagef("-e %s needs about %s of memory for %s here (%s of send and receive buffers and about %s more per rank), but %s is available (MemAvailable): lower -e or -np",
			bytesize.Format(o.maxBytes), bytesize.Approx(need), ranks, bytesize.Approx(buffers), bytesize.Approx(per-buffers), bytesize.Approx(avail))
	}
	return nil
}

// memAvailable is MemAvailable of /proc/meminfo (Linux), in bytes.
func memAvailable() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		fs := strings.Fields(rest)
		if len(fs) != 2 || fs[1] != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseInt(fs[0], 10, 64)
		return kb << 10, err == nil
	}
	return 0, false
}
