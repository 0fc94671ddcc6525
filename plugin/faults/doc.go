// Package faults is the tuner fault suite: every way a tuner plugin has been seen to hang, crash,
// flood or mislead the host, run through the three places a plugin is started (an offline
// `planner explain`, `collbench` at start, and `collbench` on a SIGHUP reload). Each case must end
// within its deadline plus a second, with the outcome the host promises (an error in the offline
// command, a fallback that says so in collbench), and leave no process of the test's own process
// tree and no plugin socket behind. The binaries are built once (TestMain); the package has no
// code of its own.
package faults
