//go:build linux

package engine

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/launch"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/engine/transport/shm"
)

// TestShmNVLSProcesses runs NVLS AllReduce with the ranks as processes over shared memory (the
// multicast object is a file of ShmDir mapped by every rank): 3 rank processes, int32 sum of 1000
// elements pinned to NVLS on 2 channels, each rank checking its result (helperRank: rank r's
// element i is r+i, so the sum is 3i+3). Each rank reports its traffic: nothing point to point,
// and ldReduce and st bytes that add up to the buffer (4000 bytes) over the ranks.
func TestShmNVLSProcesses(t *testing.T) {
	const n = 3
	job := transport.NewJobID(os.Getpid())
	out, errb := &lineBuffer{}, &lineBuffer{}
	l := &launch.Launcher{N: n, Argv: []string{os.Args[0], "-test.run=^TestShmHelperProcess$"},
		Env: append(os.Environ(), envShmHelper+"=rank", envShmNVLS+"=1"), Stdout: out, Stderr: errb,
		Job: job, Bind: launch.BindNone}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, l.Run(ctx), "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	re := regexp.MustCompile(`NVLS rank=(\d+) algo=(\S+) p2p=(\d+) ld=(\d+) st=(\d+)`)
	lines := re.FindAllStringSubmatch(out.String(), -1)
	require.Len(t, lines, n, "%s", out.String())
	var ld, st int
	for _, m := range lines {
		assert.Equal(t, costmodel.NVLS.String(), m[2], "rank %s ran", m[1])
		assert.Equal(t, "0", m[3], "rank %s: point-to-point bytes", m[1])
		a, _ := strconv.Atoi(m[4])
		b, _ := strconv.Atoi(m[5])
		ld, st = ld+a, st+b
	}
	assert.Equal(t, 4000, ld, "ldReduce bytes over the ranks")
	assert.Equal(t, 4000, st, "st bytes over the ranks")
	assert.Regexp(t, regexp.MustCompile(`(?s)(DONE rank=\d.*){3}`), out.String())
	assert.Empty(t, shm.ShmFiles(job), "the job's files are removed")
}

// TestShmNVLSTreeProcesses runs NVLS_TREE AllReduce with the ranks as processes over shared
// memory: 4 rank processes in 2 virtual nodes of 2, int32 sum of 1000 elements (4000 bytes) on 2
// channels, each rank checking its result (sum 4i+6). Traffic, by hand: each node's heads
// ld_reduce and st every byte of the buffer once (4000 bytes per node, 8000 over the ranks); the
// two nodes' trees have one edge, over which every byte goes up once and down once, so the ranks
// send 8000 payload bytes (Simple: as many wire bytes) and receive 8000: 24000 point to point.
func TestShmNVLSTreeProcesses(t *testing.T) {
	const n = 4
	job := transport.NewJobID(os.Getpid())
	out, errb := &lineBuffer{}, &lineBuffer{}
	l := &launch.Launcher{N: n, Argv: []string{os.Args[0], "-test.run=^TestShmHelperProcess$"},
		Env: append(os.Environ(), envShmHelper+"=rank", envShmNVLSTree+"=1"), Stdout: out, Stderr: errb,
		Job: job, Bind: launch.BindNone}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, l.Run(ctx), "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	re := regexp.MustCompile(`NVLS rank=(\d+) algo=(\S+) p2p=(\d+) ld=(\d+) st=(\d+)`)
	lines := re.FindAllStringSubmatch(out.String(), -1)
	require.Len(t, lines, n, "%s", out.String())
	var p2p, ld, st int
	for _, m := range lines {
		assert.Equal(t, costmodel.NVLSTree.String(), m[2], "rank %s ran", m[1])
		a, _ := strconv.Atoi(m[3])
		b, _ := strconv.Atoi(m[4])
		c, _ := strconv.Atoi(m[5])
		p2p, ld, st = p2p+a, ld+b, st+c
	}
	assert.Equal(t, 24000, p2p, "point-to-point bytes over the ranks")
	assert.Equal(t, 8000, ld, "ldReduce bytes over the ranks")
	assert.Equal(t, 8000, st, "st bytes over the ranks")
	assert.Regexp(t, regexp.MustCompile(`(?s)(DONE rank=\d.*){4}`), out.String())
	assert.Empty(t, shm.ShmFiles(job), "the job's files are removed")
}
