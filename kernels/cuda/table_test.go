package cuda

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/costmodel"
)

// TestWriteTable: calibrate reads the table back: its collective, every row's size, count, type,
// op and times; busbw is algbw x 2(n-1)/n for AllReduce on 4 ranks (1 MiB in 100 us: algbw
// 1048576/1e3/100 = 10.49 GB/s, busbw x 1.5 = 15.73).
func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	rows := []TableRow{
		{Bytes: 8, Count: 2, Type: "float", Redop: "sum", Root: -1, OOPUs: 10, IPUs: 9.5, OOPWrong: 0, IPWrong: 0},
		{Bytes: 1 << 20, Count: 1 << 18, Type: "float", Redop: "sum", Root: -1, OOPUs: 100, IPUs: 80, OOPWrong: -1, IPWrong: -1},
	}
	require.NoError(t, WriteTable(&b, costmodel.AllReduce, 4, "NVIDIA H200", "Ring LL128, 2 channels", 5, rows))
	text := b.String()
	s, err := calibrate.ParseSweep("gpu.txt", &b)
	require.NoError(t, err)
	assert.Empty(t, s.Warnings)
	assert.Equal(t, "all_reduce_perf", s.Program)
	require.Len(t, s.Rows, 2)
	assert.Equal(t, int64(1<<20), s.Rows[1].Bytes)
	assert.Equal(t, int64(1<<18), s.Rows[1].Count)
	assert.Equal(t, "float", s.Rows[1].Type)
	assert.Equal(t, "sum", s.Rows[1].Redop)
	assert.InDelta(t, 100, s.Rows[1].OOP.TimeUS, 1e-9)
	assert.InDelta(t, 80, s.Rows[1].IP.TimeUS, 1e-9)
	assert.InDelta(t, 15.73, s.Rows[1].OOP.BusBW, 0.005)
	assert.Equal(t, int64(-1), s.Rows[1].OOP.Wrong, "N/A")
	assert.Equal(t, int64(0), s.Rows[0].IP.Wrong)
	assert.Contains(t, text, "# collplan GPU communicator: Ring LL128, 2 channels")
	assert.Contains(t, text, "# Out of bounds values : 0 OK\n")
	assert.Contains(t, text, "step: 4(factor) warmup iters: 2 iters: 5 ")

	// Wrong elements are summed over the rows (N/A counts none) and fail the table, as nccl-tests
	// prints it; before, the line said "0 OK" whatever the rows held. An additive step prints as
	// nccl-tests prints it.
	b.Reset()
	rows[0].IPWrong, rows[1].OOPWrong = 2, 1
	require.NoError(t, Table{Coll: costmodel.AllGather, Ranks: 2, Device: "NVIDIA H200", Note: "Ring Simple", Warmup: 1, Iters: 3,
		StepBytes: 1 << 20}.Write(&b, rows))
	text = b.String()
	assert.Contains(t, text, "# Out of bounds values : 3 FAILED\n")
	assert.Contains(t, text, "step: 1048576(bytes) warmup iters: 1 iters: 3 ")
	assert.Contains(t, text, "# Collective test starting: all_gather_perf\n")
}
