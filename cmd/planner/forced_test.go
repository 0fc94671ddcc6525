package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// forceRingSimple is a rules configuration forcing AllReduce to Ring/Simple at every size.
const forceRingSimple = "allreduce,0,68719476736,ring,simple,-1,-1,-1\n"

// TestExplainForced: a forced plan prints the model's time of its cell (the menu's model_time_us of
// the chosen cell, the definition) in the JSON and the text, and says what forced it; an unforced
// plan says it was not forced.
func TestExplainForced(t *testing.T) {
	clearNCCLEnv(t)
	t.Setenv("PATH", tunerBin+string(os.PathListSeparator)+os.Getenv("PATH"))
	conf := writeFile(t, "force.conf", forceRingSimple)
	base := []string{"explain", "--node", "h100", "--coll", "allreduce", "--bytes", "1M"}
	for _, tc := range []struct {
		name   string
		args   []string
		forced string // "" for not forced
	}{
		{"tuner", []string{"--tuner", "rules", "--tuner-config", conf}, "by the tuner"},
		{"env", []string{"--algo", "ring", "--proto", "simple"}, "by NCCL_ALGO/NCCL_PROTO"},
		{"free", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string(nil), base...), tc.args...)
			out, _, err := runTuner(t, "", append(args, "--json")...)
			require.NoError(t, err)
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &m))
			cell := menuCell(t, m, m["algo"].(string), m["proto"].(string))
			require.Equal(t, true, cell["chosen"])
			model := cell["model_time_us"].(float64)
			require.Greater(t, model, 0.0)
			assert.Equal(t, model, m["time_us"], "time_us is the chosen cell's model time")
			assert.Equal(t, tc.forced != "", m["forced"])

			text, _, err := runTuner(t, "", args...)
			require.NoError(t, err)
			pick := regexp.MustCompile(`(?m)^-> (\S+)  (\S+) us(.*)$`).FindStringSubmatch(text)
			require.NotNil(t, pick, text)
			assert.Equal(t, fmt.Sprintf("%s/%s", m["algo"], m["proto"]), pick[1])
			assert.Equal(t, strconv.FormatFloat(model, 'f', 2, 32), pick[2])
			if tc.forced != "" {
				assert.Contains(t, pick[3], "(forced "+tc.forced+")")
			} else {
				assert.NotContains(t, pick[3], "forced")
			}
		})
	}
}

// TestMapForced: with every size forced, map prints each size's model time (not 0), marks the
// rows and the span forced, and the SVG's pick line has a point at every sample.
func TestMapForced(t *testing.T) {
	clearNCCLEnv(t)
	t.Setenv("PATH", tunerBin+string(os.PathListSeparator)+os.Getenv("PATH"))
	conf := writeFile(t, "force.conf", forceRingSimple)
	svg := filepath.Join(t.TempDir(), "map.svg")
	out, _, err := runTuner(t, "", "map", "--node", "h100", "--coll", "allreduce", "--min", "256", "--max", "64M",
		"--tuner", "rules", "--tuner-config", conf, "--svg", svg)
	require.NoError(t, err)
	rows := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "RING/SIMPLE" {
			continue
		}
		rows++
		n, err := strconv.ParseInt(f[0], 10, 64)
		require.NoError(t, err)
		m := explainJSON(t, "--node", "h100", "--coll", "allreduce", "--bytes", f[0], "--algo", "ring", "--proto", "simple")
		assert.Equal(t, strconv.FormatFloat(menuCell(t, m, "RING", "SIMPLE")["model_time_us"].(float64), 'f', 2, 32), f[4], "size %d", n)
		assert.Contains(t, line, "forced", "size %d", n)
	}
	assert.Equal(t, 19, rows, "256 B .. 64 MiB in powers of two\n%s", out)
	assert.Contains(t, out, "256 B .. 64 MiB  RING/SIMPLE forced by the tuner")
	data, err := os.ReadFile(svg)
	require.NoError(t, err)
	pick := regexp.MustCompile(`<polyline fill="none" stroke="black"[^>]*points="([^"]*)"`).FindStringSubmatch(string(data))
	require.NotNil(t, pick, "the SVG has a pick line")
	// Samples: 16 an octave from 2^8 to 2^26, both ends included.
	assert.Len(t, strings.Fields(pick[1]), 18*16+1)
	assert.Contains(t, string(data), "forced by the tuner")
}

// TestQueryForced: query's time_us of a forced plan is the model time of its cell, the model_time_us
// explain shows for that cell.
func TestQueryForced(t *testing.T) {
	clearNCCLEnv(t)
	t.Setenv("PATH", tunerBin+string(os.PathListSeparator)+os.Getenv("PATH"))
	conf := writeFile(t, "force.conf", forceRingSimple)
	out, _, err := runTuner(t, "allreduce,4K\n"+`{"coll":"allreduce","bytes":1048576}`+"\n",
		"query", "--node", "h100", "--tuner", "rules", "--tuner-config", conf)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	for i, n := range map[int]string{1: "4096", 2: "1048576"} {
		m := explainJSON(t, "--node", "h100", "--coll", "allreduce", "--bytes", n, "--algo", "ring", "--proto", "simple")
		model := menuCell(t, m, "RING", "SIMPLE")["model_time_us"].(float64)
		require.Greater(t, model, 0.0)
		var got float64
		if i == 1 {
			f := strings.Split(lines[i], ",")
			require.Len(t, f, 13, lines[i])
			assert.Equal(t, "rules", f[12], "the policy column")
			assert.Equal(t, "RING,SIMPLE", f[5]+","+f[6])
			got, err = strconv.ParseFloat(f[7], 64)
			require.NoError(t, err)
		} else {
			var a answerJSON
			require.NoError(t, json.Unmarshal([]byte(lines[i]), &a))
			got = float64(a.TimeUS)
		}
		assert.Equal(t, model, got, "size %s", n)
	}
}
