package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envTestMain makes the test binary run collbench's main (see TestMain).
const envTestMain = "COLLBENCH_TEST_MAIN"

// runTests builds tuner-rules and tuner-fault once, puts them on PATH (for --tuner NAME, in this
// process and the ranks it starts) and runs the tests.
func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "collbench-tuners-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goTool, "build", "-o", dir+string(os.PathSeparator),
		"github.com/collplan/collplan/cmd/tuner-rules", "github.com/collplan/collplan/cmd/tuner-fault").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the tuner binaries: %v\n%s", err, out)
		return 1
	}
	os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return m.Run()
}

func writeConf(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(body), 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

const (
	ruleRingSimple8 = "allreduce,0,18446744073709551615,ring,simple,8,-1,-1\n"
	ruleTreeSimple2 = "allreduce,0,18446744073709551615,tree,simple,2,-1,-1\n"
	ruleRingLL4     = "allreduce,0,18446744073709551615,ring,ll,4,-1,-1\n"
)

var (
	switchRE = regexp.MustCompile(`(?m)^# collbench: rank (\d+): switched policy at sequence (\d+): table hash \w+ -> \w+, \d+ bytes: (\S+) -> (\S+)$`)
	firstRE  = regexp.MustCompile(`(?m)^# collbench: rank (\d+): sequence (\d+), the first measured call after the switch, ran (\S+)$`)
)

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool, show func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s:\n%s", what, show())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSighupSwitch: a collbench -N 0 loop of two rank processes gets SIGHUP (at the launcher,
// which forwards it) after its rules file changes to pin another cell: every rank switches at the
// same sequence number, the first call after it runs the new cell, and nothing fails. A second
// SIGHUP with a bad rules file keeps the policy, and says so.
func TestSighupSwitch(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "rules.conf")
	writeConf(t, conf, ruleRingSimple8)
	var out, errb syncBuffer
	cmd := exec.Command(os.Args[0], "allreduce", "-np", "2", "-b", "8", "-e", "1K", "-f", "4", "-n", "2", "-w", "1",
		"-N", "0", "--tuner", "rules", "--tuner-config", conf)
	cmd.Env = append(os.Environ(), envTestMain+"=1")
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	show := func() string { return out.String() + "\n--- stderr\n" + errb.String() }
	rows := func() int { return strings.Count(out.String(), "     float     sum      -1") }
	waitFor(t, "rows", 30*time.Second, func() bool { return rows() >= 6 }, show)
	assert.Contains(t, out.String(), "tuner rules ("+conf+") as rules")

	writeConf(t, conf, ruleRingLL4)
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, "the switch on both ranks", 30*time.Second, func() bool {
		return len(firstRE.FindAllString(errb.String(), -1)) >= 2
	}, show)
	sw := switchRE.FindAllStringSubmatch(errb.String(), -1)
	require.Len(t, sw, 2, show())
	assert.NotEqual(t, sw[0][1], sw[1][1], "one line per rank")
	assert.Equal(t, sw[0][2], sw[1][2], "every rank switches at the same sequence number")
	for _, m := range sw {
		assert.Equal(t, "RING/SIMPLE/8", m[3])
		assert.Equal(t, "RING/LL/4", m[4])
	}
	for _, m := range firstRE.FindAllStringSubmatch(errb.String(), -1) {
		assert.Equal(t, "RING/LL/4", m[3], "rank %s: LastPlan of the first call after the switch", m[1])
		assert.Equal(t, atoi(t, sw[0][2]), atoi(t, m[2]), "the warmup call at the switch sequence runs the new table")
	}
	assert.Contains(t, errb.String(), "# collbench: rank 0: SIGHUP: compiled the new policy")

	// A bad file: the new table does not compile, the old one stays.
	before := rows()
	writeConf(t, conf, "allreduce,this is not a rule\n")
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, "the refusal", 30*time.Second, func() bool {
		return strings.Contains(errb.String(), "did not compile, keeping the old one")
	}, show)
	waitFor(t, "more rows", 30*time.Second, func() bool { return rows() >= before+4 }, show)
	assert.Len(t, switchRE.FindAllString(errb.String(), -1), 2, "no second switch")

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-done:
		require.NoError(t, err, show())
	case <-time.After(20 * time.Second):
		t.Fatalf("no exit after SIGINT:\n%s", show())
	}
	assert.Contains(t, out.String(), "# Out of bounds values : 0 OK")
	assert.NotContains(t, errb.String(), "mismatch")
	parse(t, out.String())
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var v int
	_, err := fmt.Sscan(s, &v)
	require.NoError(t, err)
	return v
}

var abRowRE = regexp.MustCompile(`(?m)^ +(\d+)  (\S+) +(\S+) +([\d.]+) +([\d.]+) +(-?[\d.]+)  \[ *(-?[\d.]+), *(-?[\d.]+)\]  +([\d.]+)  (A faster|B faster|no significant difference)$`)

// TestABInProcess: --ab of the built-in policy and a rules file that pins another cell prints,
// per size, both cells, the medians and a bootstrap CI with a verdict consistent with it.
func TestABInProcess(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "rules.conf")
	writeConf(t, conf, ruleTreeSimple2)
	out, stderr, err := runCollbench(t, "allreduce", "--transport", "inproc", "-np", "2", "-b", "8", "-e", "64K", "-f", "32",
		"-n", "3", "-w", "1", "--ab", "none,rules", "--ab-config-b", conf, "--ab-runs", "7")
	require.NoError(t, err, "%s\n%s", out, stderr)
	assert.Contains(t, out, "# A/B: A = none")
	assert.Contains(t, out, "B = rules ("+conf+")")
	assert.Contains(t, out, "2000 bootstrap resamples (seed 1), 95% CI")
	assert.NotContains(t, out, "same table")
	rows := abRowRE.FindAllStringSubmatch(out, -1)
	require.Len(t, rows, 3, out) // 8, 256, 8K
	for _, r := range rows {
		assert.Equal(t, "TREE/SIMPLE/2", r[3])
		assert.NotEqual(t, r[2], r[3], "the policies pick different cells")
		lo, hi := atof(t, r[7]), atof(t, r[8])
		assert.LessOrEqual(t, lo, hi)
		want := "no significant difference"
		if lo > 0 {
			want = "A faster"
		} else if hi < 0 {
			want = "B faster"
		}
		assert.Equal(t, want, r[10])
	}
	assert.Contains(t, out, "# Out of bounds values : 0 OK")
}

func atof(t *testing.T, s string) float64 {
	t.Helper()
	var v float64
	_, err := fmt.Sscan(s, &v)
	require.NoError(t, err)
	return v
}

// TestBootstrap: the interval is seeded (the same twice), covers a clear shift, and straddles zero
// for two samples of the same values.
func TestBootstrap(t *testing.T) {
	a := []float64{10, 11, 10.5, 9.8, 10.2, 10.1, 9.9}
	b := []float64{20, 21, 20.5, 19.8, 20.2, 20.1, 19.9}
	lo, hi := bootstrapDiff(a, b, 2000, 0.95, 1)
	lo2, hi2 := bootstrapDiff(a, b, 2000, 0.95, 1)
	assert.Equal(t, lo, lo2)
	assert.Equal(t, hi, hi2)
	assert.Greater(t, lo, 0.0)
	assert.InDelta(t, 10, (lo+hi)/2, 1)
	lo, hi = bootstrapDiff(a, a, 2000, 0.95, 7)
	assert.LessOrEqual(t, lo, 0.0)
	assert.GreaterOrEqual(t, hi, 0.0)
	assert.Equal(t, 10.5, median([]float64{10, 11}))
}

// TestTunerFault: with a tuner that dies mid-compile every rank falls back to the built-in policy
// identically (the rendezvous checks the tables' hash), says so, and the sweep completes.
func TestTunerFault(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "fault.conf")
	writeConf(t, conf, "exit\n")
	out, stderr, err := runCollbench(t, append([]string{"allreduce", "-np", "2", "--tuner", "fault", "--tuner-config", conf,
		"--tuner-timeout", "3s"}, small...)...)
	require.NoError(t, err, "%s\n%s", out, stderr)
	assert.Contains(t, out, "tuner fault ("+conf+") as fault; FALLBACK: tuner fault failed, using the built-in policy")
	s := parse(t, out)
	assert.False(t, s.Failed)
	require.Len(t, s.Rows, 3)

	// The same table as without a tuner.
	plain, _, err := runCollbench(t, append([]string{"allreduce", "--transport", "inproc", "-np", "2"}, small...)...)
	require.NoError(t, err)
	hash := regexp.MustCompile(`table hash ([0-9a-f]{16})`)
	require.NotNil(t, hash.FindStringSubmatch(plain))
	assert.Equal(t, hash.FindStringSubmatch(plain)[1], hash.FindStringSubmatch(out)[1])

	_, _, err = runCollbench(t, "allreduce", "--transport", "inproc", "--tuner", "nosuchtuner", "-b", "8", "-e", "8")
	assert.ErrorContains(t, err, "not found")
}

// TestTunerPin: --tuner-sha256 pins the plugin binary; a pin that does not match keeps the plugin
// from starting, and every rank runs the built-in policy and says why. A malformed pin is refused.
func TestTunerPin(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "rules.conf")
	writeConf(t, conf, ruleRingSimple8)
	wrong := strings.Repeat("0", 64)
	out, stderr, err := runCollbench(t, append([]string{"allreduce", "--transport", "inproc", "-np", "2", "--tuner", "rules",
		"--tuner-config", conf, "--tuner-sha256", wrong}, small...)...)
	require.NoError(t, err, "%s\n%s", out, stderr)
	assert.Contains(t, out, "FALLBACK: tuner rules failed, using the built-in policy")
	assert.Contains(t, out+stderr, "checksum")

	_, _, err = runCollbench(t, "allreduce", "--transport", "inproc", "--tuner", "rules", "--tuner-sha256", "abc", "-b", "8", "-e", "8")
	assert.ErrorContains(t, err, "want 64 hex digits")
}
