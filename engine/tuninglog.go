package engine

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/algorithm"
)

// NCCL-style TUNING log. With NCCL_DEBUG=INFO (or TRACE) and NCCL_DEBUG_SUBSYS naming TUNING (or
// ALL; a leading '^' turns the list into the subsystems not to log, as in NCCL), rank 0 writes one
// line per call that runs on more than one rank, in NCCL 2.24+'s format
// (reference/nccl-costmodel.md §8.1):
//
//	host:pid:tid [0] NCCL INFO AllReduce: 4096 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}
//
// Bytes is count times the element size, as NCCL prints it (per-rank send bytes for AllGather,
// per-rank receive bytes for ReduceScatter); channel{Lo..Hi} is the range of channels the call
// ran on. The lines go to Config.DebugLog, else to standard error. calibrate.ParseTuning reads
// them back.

// tuningWriter returns where rank's TUNING lines go, or nil when they are off (not rank 0, or the
// environment does not ask for them).
func tuningWriter(rank int, cfg *Config, getenv func(string) string) io.Writer {
	if rank != 0 || !tuningEnabled(getenv("NCCL_DEBUG"), getenv("NCCL_DEBUG_SUBSYS")) {
		return nil
	}
	if cfg.DebugLog != nil {
		return cfg.DebugLog
	}
	return os.Stderr
}

// tuningEnabled reports whether NCCL_DEBUG=level and NCCL_DEBUG_SUBSYS=subsys log TUNING INFO
// lines. NCCL's default subsystems (INIT, BOOTSTRAP, ENV) do not include TUNING.
func tuningEnabled(level, subsys string) bool {
	switch strings.ToUpper(strings.TrimSpace(level)) {
	case "INFO", "TRACE":
	default:
		return false
	}
	s := strings.TrimSpace(subsys)
	invert := strings.HasPrefix(s, "^")
	if invert {
		s = s[1:]
	}
	named := false
	for _, f := range strings.Split(s, ",") {
		switch strings.ToUpper(strings.TrimSpace(f)) {
		case "TUNING", "ALL":
			named = true
		}
	}
	return named != invert
}

// tuningPrefix is NCCL's "host:pid:tid [rank] NCCL INFO " (the host name up to its first dot).
func tuningPrefix(rank int) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	host, _, _ = strings.Cut(host, ".")
	return fmt.Sprintf("%s:%d:%d [%d] NCCL INFO ", host, os.Getpid(), gettid(), rank)
}

// logTuning writes cl's TUNING line when the log is on.
func (c *Comm) logTuning(cl *call) {
	w := c.tuneLog
	if w == nil {
		return
	}
	lo, hi := callChannels(cl.count, cl.es, cl.plan.Channels)
	fmt.Fprintf(w, "%s%s: %d Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}\n",
		tuningPrefix(c.rank), collLogName(cl.coll), int64(cl.count)*int64(cl.es),
		cl.plan.Algo, cl.plan.Proto, lo, hi)
}

// callChannels is the range of channels a call of count elements of es bytes planned on nc
// channels runs on: execute's split gives every channel per elements, so the last ones may get
// none.
func callChannels(count, es, nc int) (lo, hi int) {
	if count <= 0 || nc <= 0 {
		return 0, 0
	}
	per := algorithm.RoundUp(algorithm.DivUp(count, nc), algorithm.AlignElems(es))
	return 0, min(nc, algorithm.DivUp(count, per)) - 1
}

// collLogName is the collective's name as NCCL's TUNING line prints it.
func collLogName(c costmodel.Coll) string { return c.String() }
