package engine

import (
	"errors"
	"fmt"

	"github.com/collplan/collplan/engine/internal/wire"
)

// Errors returned by the engine. Match them with errors.Is.
var (
	// ErrInvalid: a call's arguments are invalid on this rank (count, buffer sizes, dtype, op,
	// root). Every other rank of the call gets ErrRejected, and the communicator is aborted unless
	// every rank found the call invalid.
	ErrInvalid = wire.ErrInvalid
	// ErrRejected: another rank found the call's arguments invalid (see ErrInvalid) or could not
	// plan it.
	ErrRejected = errors.New("engine: call rejected by another rank")
	// ErrMismatch: the ranks called with different collectives, counts, dtypes, ops, roots or
	// plans. Every rank of the call gets it (as a *MismatchError), and the communicator is aborted:
	// data of the call may have moved (agree.go).
	ErrMismatch = errors.New("engine: call mismatch across ranks")
	// ErrNotImplemented: the plan names an algorithm (or an algorithm for a collective) the engine
	// does not run.
	ErrNotImplemented = errors.New("not implemented in the engine")
	// ErrAborted: the communicator was aborted (a rank's context was cancelled or a rank was closed
	// during a collective); every later call fails with it.
	ErrAborted = wire.ErrAborted
	// ErrClosed: the Comm was closed.
	ErrClosed = wire.ErrClosed
	// ErrPeerClosed: another rank closed its Comm while this rank waited for it to join a call.
	ErrPeerClosed = errors.New("engine: a peer rank closed the communicator")
	// ErrConfig: the ranks were built with different configurations, or the transport's regions
	// do not fit them.
	ErrConfig = wire.ErrConfig
)

// MismatchError describes the first field in which some rank's call differs from rank 0's. Every
// rank of the call gets the same MismatchError.
type MismatchError struct {
	Field string // "collective", "count", "dtype", "op", "root", "algorithm", ...
	Rank  int    // the lowest rank that differs from rank 0
	Got   string // that rank's value
	Want  string // rank 0's value
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("engine: call mismatch across ranks: %s: rank %d has %s, rank 0 has %s", e.Field, e.Rank, e.Got, e.Want)
}

// Is makes errors.Is(err, ErrMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// AbortError says which rank the abort names and why (engine/internal/wire, whose launcher and
// transports decode abort words too, defines it).
type AbortError = wire.AbortError

// Abort reasons, stored in the abort word (engine/internal/wire's errors.go says what each means).
const (
	abortCancel         = wire.AbortCancel
	abortClosed         = wire.AbortClosed
	abortInternal       = wire.AbortInternal
	abortUser           = wire.AbortUser
	abortDisagree       = wire.AbortDisagree
	abortPeer           = wire.AbortPeer
	abortGone           = wire.AbortGone
	abortStalled        = wire.AbortStalled
	abortExited         = wire.AbortExited
	abortCollNet        = wire.AbortCollNet
	abortEndpoint       = wire.AbortEndpoint
	abortCollNetStalled = wire.AbortCollNetStalled
)

// AbortWord returns the value that, stored with an atomic 8-byte store at byte CtrlAbortOffset of
// the "ctrl" region while the word is still 0, aborts the communicator on behalf of rank: every
// rank's waits end with an *AbortError naming it. A launcher that sees a rank's process die uses
// it, since a dead process cannot abort for itself.
func AbortWord(rank int) uint64 { return wire.AbortWord(rank, abortUser) }
