package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/tables"
)

// collbenchBin is the collbench TestMain builds once; collbenchErr says why it is missing.
var collbenchBin, collbenchErr = "", error(nil)

func TestMain(m *testing.M) {
	if os.Getenv("CALIBRATE_TEST_MAIN") == "1" {
		// Run as the calibrate command (for exit statuses).
		os.Args = append([]string{"calibrate"}, strings.Fields(os.Getenv("CALIBRATE_TEST_ARGS"))...)
		main()
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "calibrate-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin := filepath.Join(dir, "collbench")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/collplan/collplan/cmd/collbench").CombinedOutput()
	if err != nil {
		collbenchErr = fmt.Errorf("go build collbench: %v\n%s", err, out)
	} else {
		collbenchBin = bin
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func needCollbench(t *testing.T) string {
	t.Helper()
	require.NoError(t, collbenchErr)
	return collbenchBin
}

// TestRunQuickEndToEnd: calibrate --node cpu --run --quick measures, fits, writes the overlay, the
// manifest and a well-formed SVG, all within 60 s; --check then evaluates the overlay on those
// sweeps without refitting.
func TestRunQuickEndToEnd(t *testing.T) {
	bin := needCollbench(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	sweeps, overlay, svg := filepath.Join(dir, "sweeps"), filepath.Join(dir, "cpu.fit.toml"), filepath.Join(dir, "fit.svg")
	var out, errb bytes.Buffer
	start := time.Now()
	err := run(ctx, []string{"--node", "cpu", "--run", "--quick", "--collbench", bin, "--sweeps-out", sweeps,
		"--out", overlay, "--svg", svg, "--json", "--date", "2026-11-30"}, &out, &errb)
	require.NoError(t, err, errb.String())
	t.Logf("--run --quick took %s", time.Since(start))
	assert.NotContains(t, errb.String(), "\r", "no progress bar when stderr is not a terminal")
	var rep calibrate.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.Equal(t, 1, rep.Nodes)
	assert.NotEmpty(t, rep.Points)

	man, err := calibrate.LoadManifest(filepath.Join(sweeps, calibrate.ManifestName))
	require.NoError(t, err)
	var pins []string
	for _, e := range man.Sweeps {
		assert.Equal(t, "allreduce", e.Coll)
		assert.Equal(t, 1, e.Nodes)
		pins = append(pins, e.Algo+"/"+e.Proto)
		_, err := os.Stat(filepath.Join(sweeps, e.File))
		assert.NoError(t, err)
	}
	// The cpu table makes LL128 illegal (the auto gate at PHB); the engine has Tree for AllReduce
	// and NVLS (Simple only) on one node of 2 ranks, the emulated multicast switch.
	assert.Equal(t, []string{"Tree/LL", "Tree/Simple", "Ring/LL", "Ring/Simple", "NVLS/Simple", "/"}, pins)

	data, err := os.ReadFile(overlay)
	require.NoError(t, err)
	base, err := tables.Load("cpu")
	require.NoError(t, err)
	n, err := tables.ApplyOverlay(base, overlay, data)
	require.NoError(t, err)
	require.NotNil(t, n.Fit)
	assert.NotEmpty(t, n.Fit.Cell)

	checkXML(t, svg)

	// --check: no refit, the overlay is read, not written.
	out.Reset()
	errb.Reset()
	require.NoError(t, run(ctx, []string{"--node", "cpu", "--check", sweeps, "--out", overlay, "--json"}, &out, &errb), errb.String())
	var ev calibrate.Eval
	require.NoError(t, json.Unmarshal(out.Bytes(), &ev))
	// --quick sweeps free runs too: NCCL's default is the fourth policy.
	require.Len(t, ev.Policies, 4)
	assert.Equal(t, []string{"prior", "fitted", "ring/simple", "nccl default"},
		[]string{ev.Policies[0].Name, ev.Policies[1].Name, ev.Policies[2].Name, ev.Policies[3].Name})
	assert.Positive(t, ev.EnvelopePoints)
	assert.Positive(t, ev.Policies[1].RegretSizes)
	after, err := os.ReadFile(overlay)
	require.NoError(t, err)
	assert.Equal(t, data, after)

	out.Reset()
	require.NoError(t, run(ctx, []string{"--node", "cpu", "--check", sweeps, "--out", overlay}, &out, &errb))
	assert.Contains(t, out.String(), "goal (fitted median regret <= 5%")
}

func checkXML(t *testing.T, file string) {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	d := xml.NewDecoder(f)
	root, circles := "", 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "SVG is not well-formed XML")
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if se.Name.Local == "circle" {
				circles++
			}
		}
	}
	assert.Equal(t, "svg", root)
	assert.Positive(t, circles)
}

func TestRunBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node", "cpu", "--run", "--sweeps", fixtures}, "drop --sweeps"},
		{[]string{"--node", "cpu", "--quick"}, "need --run"},
		{[]string{"--node", "cpu", "--run", "--transport", "tcp"}, `--transport "tcp"`},
		{[]string{"--node", "cpu", "--run", "--np", "3"}, "--np 3"},
		{[]string{"--node", "cpu", "--run", "--colls", "allfoo"}, "--colls"},
		{[]string{"--node", "cpu", "--run", "--min", "1M", "--max", "8"}, "--min"},
		{[]string{"--node", "cpu", "--run", "--factor", "1"}, "--factor 1"},
		{[]string{"--node", "cpu", "--run", "--max", "12Q"}, "12Q"},
		{[]string{"--node", "cpu", "--run", "--collbench", "/does/not/exist"}, "--collbench"},
		{[]string{"--node", "cpu", "--check", fixtures, "--sweeps", fixtures}, "drop --sweeps"},
		{[]string{"--node", "cpu", "--check", fixtures, "--holdout", "2"}, "--holdout"},
		{[]string{"--node", "h200", "--check", fixtures, "--out", "/does/not/exist.fit.toml"}, "overlay"},
		{[]string{"--node", "cpu", "--run", "--check", "x", "--sweeps-out", "y"}, "--sweeps-out"},
		{[]string{"--bogus"}, "bogus"},
		{[]string{"--node", "cpu", "--sweeps", fixtures, "--repeat", "2"}, "need --run"},
		{[]string{"--node", "cpu", "--run", "--repeat", "0"}, "--repeat 0"},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errb)
		require.Error(t, err, tc.args)
		var ue usageError
		assert.ErrorAs(t, err, &ue, "exit status 2 for %v", tc.args)
		assert.Contains(t, err.Error()+errb.String(), tc.want, tc.args)
	}
}

// TestExitStatus runs the command's main: bad flags exit with status 2.
func TestExitStatus(t *testing.T) {
	for _, args := range []string{"--bogus", "--node cpu --quick", "--node cpu --run --np 3"} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "CALIBRATE_TEST_MAIN=1", "CALIBRATE_TEST_ARGS="+args)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, args)
		assert.Equal(t, 2, ee.ExitCode(), "%s: %s", args, errb.String())
		assert.Contains(t, errb.String(), "calibrate:")
	}
}
