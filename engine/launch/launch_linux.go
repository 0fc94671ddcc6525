//go:build linux

package launch

import "syscall"

// rankProcAttr makes the kernel kill a rank when its launcher dies (prctl PR_SET_PDEATHSIG), so
// that ranks never outlive a launcher that was killed or died of a broken pipe (collbench | head):
// nobody would be left to abort the communicator for them, and a rank waiting for a peer that died
// with the launcher would wait forever. SIGKILL, not SIGTERM: a rank may handle SIGTERM by
// finishing its current size first (collbench does), which is exactly the wait that never ends.
// The job's segments are then stale, and the next launch removes them. The signal follows the
// launcher's thread that started the rank, which Launch keeps locked to its goroutine for the
// whole job.
func rankProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
