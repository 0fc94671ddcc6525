//go:build linux

// Package proctree finds the processes a test started, wherever they were reparented: every
// process of a test case carries a marker variable in its environment (descendants inherit it), and
// Marked lists the live ones that do. Tests use it to check that nothing they started is left
// running. Linux only (it reads /proc).
package proctree

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Marked lists the live processes (zombies excluded) other than this one whose environment holds
// marker, a "NAME=VALUE" string.
func Marked(marker string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(env, []byte(marker+"\x00")) {
			continue
		}
		if State(pid) == 'Z' {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// State is process pid's state letter from /proc/PID/stat ('R', 'S', 'T', 'Z', ...), 0 when it is
// gone.
func State(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// Cmdline is process pid's command line, its arguments joined by spaces.
func Cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}
