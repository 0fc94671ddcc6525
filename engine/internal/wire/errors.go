package wire

import "errors"

// The errors of the engine that the rooms below it return too; the engine re-exports them
// (engine.ErrInvalid is ErrInvalid, ...), where their documentation is.
var (
	ErrInvalid = errors.New("engine: invalid argument")
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
)

// AbortWord is the abort word's value that names rank for reason: (rank+1)<<8 | reason, never 0.
func AbortWord(rank, reason int) uint64 { return uint64(rank+1)<<8 | uint64(reason) }
