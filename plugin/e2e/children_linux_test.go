//go:build linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/internal/proctree"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin"
)

// TestScriptChildren: a tuner script whose child outlives it (sleep, not exec sleep) or that
// leaves a background child behind costs the host its start deadline at most, and Close leaves
// no process of it: the host kills the plugin's whole process group. go-plugin's own Kill waited
// for the plugin's stdout reader, which the child kept open: the host never returned.
func TestScriptChildren(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		works      bool
	}{
		{"child outlives", "sleep 600", false},
		{"background child", "sleep 600 &\nexec '" + tuner("nccl") + "'", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := fmt.Sprintf("COLLPLAN_E2E_CASE=%d-%s", os.Getpid(), strings.ReplaceAll(tc.name, " ", "_"))
			name, val, _ := strings.Cut(marker, "=")
			t.Setenv(name, val)
			script := filepath.Join(t.TempDir(), "tuner.sh")
			require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\n"+tc.body+"\n"), 0o755))
			c, err := plugin.New(plugin.Config{Path: script, StartTimeout: time.Second, CallTimeout: time.Second,
				Logger: plugin.DefaultLogger(io.Discard, hclog.Warn)})
			require.NoError(t, err)
			done := make(chan string, 1)
			start := time.Now()
			go func() {
				pl, err := c.Planner(context.Background(), h100(t, 1), planner.Config{})
				if err != nil {
					done <- err.Error()
					return
				}
				dt, err := pl.Compile(context.Background(), classes()[0])
				if err != nil {
					done <- err.Error()
					return
				}
				_ = c.Close()
				done <- dt.TunerNote
			}()
			var note string
			select {
			case note = <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("the host still waits 10 s after starting the plugin (deadline 1 s)")
			}
			assert.Less(t, time.Since(start), 2*time.Second, "within the deadline plus a second")
			if tc.works {
				assert.Empty(t, note)
			} else {
				assert.Contains(t, note, "timeout while waiting for plugin to start")
			}
			deadline := time.Now().Add(2 * time.Second)
			var left []int
			for {
				left = proctree.Marked(marker)
				if len(left) == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			for _, pid := range left {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			assert.Empty(t, left, "processes of the plugin left running")
		})
	}
}
