package engine

import (
	"fmt"

	"github.com/collplan/collplan/planner"
)

// Seq returns the sequence number of the last collective this rank started (0 before the first);
// the next call is Seq()+1. Every rank of a communicator numbers the calls alike, so a sequence
// number names one call on every rank.
func (c *Comm) Seq() uint64 {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	return c.seq
}

// SwapTables replaces the DecisionTables (Config.Tables, with Config.Plan cleared) from the call
// with sequence number seq on. It must be called between calls, when seq is the next call
// (Seq()+1); otherwise it changes nothing and returns an ErrInvalid error, so that a rank that is
// not where the others agreed to switch finds out instead of running calls with another policy.
// Every rank must make the same swap at the same seq: a plan that differs across ranks is a
// mismatch (agree.go), as with SetOverride. The configuration word checked at start is not
// changed.
func (c *Comm) SwapTables(seq uint64, tables []*planner.DecisionTable) error {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	if c.ctl.Closed.Load() {
		return ErrClosed
	}
	if seq != c.seq+1 {
		return fmt.Errorf("%w: swap of tables at call %d, but the next call is %d", ErrInvalid, seq, c.seq+1)
	}
	c.cfg.Plan = nil
	c.cfg.Tables = append([]*planner.DecisionTable(nil), tables...)
	return nil
}
