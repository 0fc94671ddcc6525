package wire

import (
	"errors"
	"fmt"
)

// The errors of the engine that the rooms below it return too; the engine re-exports them
// (engine.ErrInvalid is ErrInvalid, ...), where their documentation is.
var (
	ErrInvalid = errors.New("engine: invalid argument")
	ErrAborted = errors.New("engine: communicator aborted")
	ErrClosed  = errors.New("engine: communicator closed")
	ErrConfig  = errors.New("engine: configuration mismatch")
)

// Abort reasons, stored in the abort word (see AbortWord).
const (
	AbortCancel         = 1  // the rank's context was done
	AbortClosed         = 2  // the rank's Comm was closed during a call
	AbortInternal       = 3  // the rank failed (transport error, ...)
	AbortUser           = 4  // Comm.Abort, or engine.AbortWord stored by a launcher
	AbortDisagree       = 5  // the ranks disagreed on a call (the engine's agree.go)
	AbortPeer           = 6  // a peer closed without joining a call; the word names the peer
	AbortGone           = 7  // the named rank is lost: its rendezvous connection ended without a goodbye
	AbortStalled        = 8  // the named rank stopped moving data: the watchdog (Config.Timeout) fired
	AbortExited         = 9  // the named rank's process exited (its launcher saw it)
	AbortCollNet        = 10 // the rank's connection to the CollNet aggregation endpoint failed
	AbortEndpoint       = 11 // the launcher saw the CollNet aggregation endpoint's process exit; no rank named
	AbortCollNetStalled = 12 // the rank waited past the watchdog's timeout for the CollNet endpoint, every rank alive
	AbortHostLost       = 13 // the named rank's host is lost: the net transport's link to it failed (engine/transport/net)
)

// AbortWord is the abort word's value that names rank for reason: (rank+1)<<8 | reason, never 0.
func AbortWord(rank, reason int) uint64 { return uint64(rank+1)<<8 | uint64(reason) }

// AbortError says which rank the abort names and why: the rank that aborted the communicator,
// or, when Lost is set, the rank that another rank found gone or stalled (a dead or stopped
// process cannot abort for itself).
type AbortError struct {
	Rank   int
	Reason string
	Lost   bool
}

func (e *AbortError) Error() string {
	if e.Rank < 0 {
		return fmt.Sprintf("engine: communicator aborted: %s", e.Reason)
	}
	if e.Lost {
		return fmt.Sprintf("engine: communicator aborted: rank %d: %s", e.Rank, e.Reason)
	}
	return fmt.Sprintf("engine: communicator aborted by rank %d (%s)", e.Rank, e.Reason)
}

// Is makes errors.Is(err, ErrAborted) true.
func (e *AbortError) Is(target error) bool { return target == ErrAborted }

// AbortReasons are the reasons' texts, by reason.
var AbortReasons = [...]string{"", "context done", "closed during a collective", "internal error", "aborted",
	"the ranks disagreed on a call", "a peer closed without joining a call",
	"lost: its rendezvous connection ended without a goodbye (its process died, or the connection was cut)",
	"it stopped moving data: a rank waited on it past the watchdog's timeout (stopped, hung, or not in the call)",
	"its process exited before the job ended",
	"its connection to the CollNet aggregation endpoint failed (the endpoint died, stopped, or failed the job)",
	"the CollNet aggregation endpoint's process exited before the job ended",
	"it waited past the watchdog's timeout for the CollNet aggregation endpoint, every rank alive (the endpoint is stopped or hung)",
	"lost: the net transport's link to its host failed (the host died, closed early, or the link was cut)"}

// AbortNames reports whether abort word w names a rank at fault (gone or stalled) rather than the
// rank that aborted.
func AbortNames(w uint64) bool {
	r := int(w & 0xff)
	return r == AbortGone || r == AbortStalled || r == AbortExited || r == AbortHostLost
}

// AbortErr is the *AbortError of abort word w.
func AbortErr(w uint64) error {
	reason := int(w & 0xff)
	r := "unknown"
	if reason < len(AbortReasons) {
		r = AbortReasons[reason]
	}
	return &AbortError{Rank: int(w>>8) - 1, Reason: r, Lost: AbortNames(w)}
}
