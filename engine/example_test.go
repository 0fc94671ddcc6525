package engine_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/kernels"
)

// Four ranks, each a goroutine, average a float32 vector with a pinned Tree/LL128 plan over two
// virtual nodes of two ranks.
func ExampleNewInProcess() {
	const n, count = 4, 3
	comms, err := engine.NewInProcess(n, engine.Config{RanksPerNode: 2, Override: engine.Pin(costmodel.Tree, costmodel.LL128)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	results := make([][]byte, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4*count)
			for i := 0; i < count; i++ { // rank r holds (r, 10r, 100r)
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(r)*float32(math.Pow10(i))))
			}
			if err := c.AllReduce(context.Background(), buf, buf, count, kernels.Float32, kernels.Avg); err != nil {
				fmt.Println(err)
			}
			results[r] = buf
		}()
	}
	wg.Wait()
	for i := 0; i < count; i++ {
		fmt.Print(math.Float32frombits(binary.LittleEndian.Uint32(results[3][4*i:])), " ")
	}
	fmt.Println()
	// Output: 1.5 15 150
}
