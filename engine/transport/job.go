package transport

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/collplan/collplan/engine/internal/wire"
)

// A job id names one job's communicator across processes: the shared-memory files
// (engine/transport/shm), the rendezvous and the CollNet endpoint's jobs.

// NewJobID returns a fresh job id owned by process pid.
func NewJobID(pid int) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return strconv.Itoa(pid) + "." + hex.EncodeToString(b[:])
}

// JobOwner returns the owner pid of a job id made by NewJobID.
func JobOwner(jobID string) (int, bool) {
	p, _, ok := strings.Cut(jobID, ".")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(p)
	return pid, err == nil && pid > 0
}

// ValidJobID checks that jobID is a job id made by NewJobID (and a safe file name prefix).
func ValidJobID(jobID string) error {
	if _, ok := JobOwner(jobID); !ok || strings.ContainsAny(jobID, "/-\x00") {
		return fmt.Errorf("%w: job id %q (want <pid>.<hex>)", wire.ErrInvalid, jobID)
	}
	return nil
}
