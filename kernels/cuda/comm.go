package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/kernels"
)

// CommConfig configures a GPU communicator.
type CommConfig struct {
	Ranks    int         // ranks, all on one device (they share it)
	Channels int         // channels: one thread block per rank and channel
	Buffers  ConnBuffers // per connection and protocol
	Device   int         // the device ordinal
	Threads  int         // threads per block (a multiple of 64; 0: 256)
}

// Comm is a GPU communicator of n ranks in this process on one device: every rank's buffers and
// connection regions (the engine's layout) are device memory, and all ranks' blocks of a call run
// in one launch of n x channels blocks, no more than the device has SMs, so that a block
// spinning on a peer never waits for one that is not resident. It runs Ring for the five
// collectives and Tree for AllReduce (split up and down teams), one call at a time, from any goroutine (the calls lock an OS thread, on which the
// device's primary context is current).
//
// It has not run on a GPU yet (no machine was lent to the task that wrote it): what is tested is
// its plan (ringWorks, against hand-derived ranges) and its refusal without a driver.
type Comm struct {
	mu      sync.Mutex
	drv     *Driver
	dev     Device
	h       int32
	ctx     uintptr
	mod     uintptr
	fns     map[string]uintptr
	cfg     CommConfig
	regions uint64 // channels x ranks ring connection regions, in one allocation
	steps   uint64 // channels x ranks x 2 ring step counts (send, recv)
	tregs   uint64 // channels x ranks x 2 tree connection regions (child to parent, parent to child)
	tsteps  uint64 // a sender's and a receiver's step count per tree region
	trees   [2][]capabilities.TreeLinks
	rings   uint64 // channels x ranks int32 ring orders
	abort   uint64
	works   uint64 // ranks x channels Works
}

// NewComm opens the driver (without one: ErrNoDriver), compiles the kernels with NVRTC for the
// device's architecture (through the cache), loads them, and allocates the connections.
func NewComm(cfg CommConfig) (*Comm, error) {
	if cfg.Threads == 0 {
		cfg.Threads = 256
	}
	switch {
	case cfg.Ranks < 2:
		return nil, fmt.Errorf("cuda: %d ranks: want 2 or more", cfg.Ranks)
	case cfg.Channels < 1 || cfg.Channels > engine.MaxChannels:
		return nil, fmt.Errorf("cuda: %d channels: want 1..%d", cfg.Channels, engine.MaxChannels)
	case cfg.Threads%64 != 0 || cfg.Threads > 1024:
		return nil, fmt.Errorf("cuda: %d threads per block: want a multiple of 64 up to 1024", cfg.Threads)
	}
	if err := cfg.Buffers.check(); err != nil {
		return nil, err
	}
	drv, err := OpenDriver()
	if err != nil {
		return nil, err
	}
	devs, err := drv.Devices()
	if err != nil {
		return nil, err
	}
	if cfg.Device < 0 || cfg.Device >= len(devs) {
		return nil, fmt.Errorf("cuda: device %d: the driver sees %d", cfg.Device, len(devs))
	}
	dev := devs[cfg.Device]
	if blocks := cfg.Ranks * cfg.Channels; blocks > dev.Multiprocessors {
		return nil, fmt.Errorf("cuda: %d ranks x %d channels = %d blocks, above the %d SMs of %s: not every block could be resident",
			cfg.Ranks, cfg.Channels, blocks, dev.Multiprocessors, dev.Name)
	}
	nv, err := OpenNVRTC()
	if err != nil {
		return nil, err
	}
	dir, err := DefaultCacheDir()
	if err != nil {
		return nil, err
	}
	files, err := SourceFiles()
	if err != nil {
		return nil, err
	}
	out, _, err := nv.CompileCached(Cache{Dir: dir}, files, MainSource, dev.Arch())
	if err != nil {
		return nil, err
	}
	if len(out.CUBIN) == 0 {
		return nil, fmt.Errorf("cuda: NVRTC made no cubin for %s", dev.Arch())
	}
	trees, err := Trees(cfg.Ranks)
	if err != nil {
		return nil, err
	}
	c := &Comm{drv: drv, dev: dev, cfg: cfg, fns: map[string]uintptr{}, trees: trees}
	err = c.locked(func() error {
		if err := drv.check("cuDeviceGet", drv.deviceGet(&c.h, int32(cfg.Device))); err != nil {
			return err
		}
		if err := drv.check("cuDevicePrimaryCtxRetain", drv.ctxRetain(&c.ctx, c.h)); err != nil {
			return err
		}
		if err := drv.check("cuCtxSetCurrent", drv.ctxSet(c.ctx)); err != nil {
			return err
		}
		if err := drv.check("cuModuleLoadData", drv.moduleLoad(&c.mod, &out.CUBIN[0])); err != nil {
			return err
		}
		nch, n := cfg.Channels, cfg.Ranks
		for _, a := range []struct {
			p     *uint64
			bytes int
		}{
			{&c.regions, nch * n * cfg.Buffers.RegionBytes()},
			{&c.steps, nch * n * 2 * 8},
			{&c.tregs, nch * n * 2 * cfg.Buffers.RegionBytes()},
			{&c.tsteps, nch * n * 2 * 2 * 8},
			{&c.rings, nch * n * 4},
			{&c.abort, 8},
			{&c.works, nch * n * int(unsafe.Sizeof(Work{}))},
		} {
			if err := drv.check("cuMemAlloc", drv.memAlloc(a.p, uint64(a.bytes))); err != nil {
				return err
			}
			if err := drv.check("cuMemsetD8", drv.memsetD8(*a.p, 0, uint64(a.bytes))); err != nil {
				return err
			}
		}
		rings := make([]int32, 0, nch*n)
		for ch := range nch {
			rings = append(rings, RingOrder(n, ch)...)
		}
		return drv.check("cuMemcpyHtoD", drv.memcpyHtoD(c.rings, unsafe.Pointer(&rings[0]), uint64(4*len(rings))))
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// locked runs f on a locked OS thread with the communicator's context current.
func (c *Comm) locked(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if c.ctx != 0 {
		if err := c.drv.check("cuCtxSetCurrent", c.drv.ctxSet(c.ctx)); err != nil {
			return err
		}
	}
	return f()
}

// Close frees the device memory and releases the context.
func (c *Comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == 0 {
		return nil
	}
	return c.locked(func() error {
		for _, p := range []uint64{c.regions, c.steps, c.tregs, c.tsteps, c.rings, c.abort, c.works} {
			if p != 0 {
				c.drv.memFree(p)
			}
		}
		if c.mod != 0 {
			c.drv.moduleUnload(c.mod)
		}
		c.drv.ctxRelease(c.h)
		c.ctx = 0
		return nil
	})
}

// Call is one collective on every rank, with Ring, or Tree for AllReduce (Algo; the zero value is
// Tree's costmodel number, so set it): send[r] and recv[r] are rank r's host buffers
// (little-endian elements; recv[r] may be send[r], in place), count as NCCL's (per rank for
// AllGather and ReduceScatter). Scalars are PreMulSum's per-rank factors (nil otherwise).
type Call struct {
	Algo    costmodel.Algo
	Coll    costmodel.Coll
	Proto   int
	Dtype   kernels.Dtype
	Op      kernels.Op
	Count   int
	Root    int
	Send    [][]byte
	Recv    [][]byte
	Scalars [][]byte
}

// prepared is a checked call: its plan's inputs and its kernel.
type prepared struct {
	rc                ringCall
	algo, name        string
	inElems, outElems int
}

// prepare checks call (every buffer's length unless sizesOnly) and finds its kernel.
func (c *Comm) prepare(call Call, sizesOnly bool) (*prepared, error) {
	n, es := c.cfg.Ranks, call.Dtype.Size()
	if es == 0 || !call.Op.Valid() || call.Proto < ProtoLL || call.Proto > ProtoSimple ||
		(!sizesOnly && (len(call.Send) != n || len(call.Recv) != n)) {
		return nil, fmt.Errorf("cuda: bad call: dtype %v, op %v, protocol %d, %d send and %d recv buffers for %d ranks",
			call.Dtype, call.Op, call.Proto, len(call.Send), len(call.Recv), n)
	}
	inElems, outElems := call.Count, call.Count
	switch call.Coll {
	case costmodel.AllGather:
		outElems *= n
	case costmodel.ReduceScatter:
		inElems *= n
	}
	if call.Count <= 0 || call.Root < 0 || call.Root >= n {
		return nil, fmt.Errorf("cuda: bad call: count %d, root %d for %d ranks", call.Count, call.Root, n)
	}
	if (call.Op == kernels.PreMulSum) != (call.Scalars != nil) || (call.Scalars != nil && len(call.Scalars) != n) {
		return nil, fmt.Errorf("cuda: bad call: %d PreMulSum scalars for op %v on %d ranks (one per rank for PreMulSum, none otherwise)",
			len(call.Scalars), call.Op, n)
	}
	// In place (the same buffer) only where input and output have one size: AllReduce, Broadcast
	// and Reduce; AllGather and ReduceScatter always run out of place on the device.
	inPlace := !sizesOnly && inElems == outElems && len(call.Send[0]) > 0 && len(call.Recv[0]) > 0 && &call.Send[0][0] == &call.Recv[0][0]
	rc := ringCall{n: n, channels: c.cfg.Channels, count: call.Count, es: es, proto: call.Proto, buffers: c.cfg.Buffers,
		root: call.Root, inPlace: inPlace, opArgs: make([]uint64, n)}
	var typ string
	switch call.Coll {
	case costmodel.AllGather, costmodel.Broadcast:
		typ = fmt.Sprintf("b%d", 8*es)
	default:
		typ = call.Dtype.String()
		for r := range n {
			var sc []byte
			if call.Op == kernels.PreMulSum {
				sc = call.Scalars[r]
			}
			red, err := kernels.NewReducer(call.Dtype, call.Op, n, sc)
			if err != nil {
				return nil, err
			}
			rc.devOp, rc.opArgs[r] = int(red.DevOp()), red.Arg()
		}
	}
	algo := "ring"
	switch {
	case call.Algo == costmodel.Tree && call.Coll == costmodel.AllReduce:
		algo = "tree"
	case call.Algo != costmodel.Ring:
		return nil, fmt.Errorf("cuda: %v %v: the GPU communicator runs Ring, and Tree for AllReduce", call.Algo, call.Coll)
	}
	return &prepared{rc: rc, algo: algo, name: KernelName(algo, collName(call.Coll), typ, call.Proto), inElems: inElems, outElems: outElems}, nil
}

// Run copies the inputs to the device, runs the call in one launch, and copies the outputs back.
func (c *Comm) Run(call Call) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == 0 {
		return errors.New("cuda: communicator closed")
	}
	pc, err := c.prepare(call, false)
	if err != nil {
		return err
	}
	n, es, rc, name, inElems, outElems := c.cfg.Ranks, call.Dtype.Size(), pc.rc, pc.name, pc.inElems, pc.outElems
	return c.locked(func() error {
		fn, err := c.function(name)
		if err != nil {
			return err
		}
		a := c.addrs()
		var bufs []uint64
		defer func() {
			for _, p := range bufs {
				c.drv.memFree(p)
			}
		}()
		alloc := func(bytes int) (uint64, error) {
			var p uint64
			err := c.drv.check("cuMemAlloc", c.drv.memAlloc(&p, uint64(max(bytes, 1))))
			if err == nil {
				bufs = append(bufs, p)
			}
			return p, err
		}
		for r := range n {
			if len(call.Send[r]) != inElems*es || len(call.Recv[r]) != outElems*es {
				return fmt.Errorf("cuda: rank %d: %d and %d bytes, want %d and %d", r, len(call.Send[r]), len(call.Recv[r]), inElems*es, outElems*es)
			}
			var err error
			if a.send[r], err = alloc(inElems * es); err != nil {
				return err
			}
			a.recv[r] = a.send[r]
			if !rc.inPlace {
				if a.recv[r], err = alloc(outElems * es); err != nil {
					return err
				}
			}
			if inElems > 0 {
				if err := c.drv.check("cuMemcpyHtoD", c.drv.memcpyHtoD(a.send[r], unsafe.Pointer(&call.Send[r][0]), uint64(inElems*es))); err != nil {
					return err
				}
			}
		}
		if err := c.writeWorks(pc, a); err != nil {
			return err
		}
		if err := c.launch(fn, name); err != nil {
			return err
		}
		if err := c.drv.check("cuCtxSynchronize", c.drv.ctxSync()); err != nil {
			return err
		}
		for r := range n {
			if outElems > 0 {
				if err := c.drv.check("cuMemcpyDtoH", c.drv.memcpyDtoH(unsafe.Pointer(&call.Recv[r][0]), a.recv[r], uint64(outElems*es))); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// function returns the kernel name, from the module (once).
func (c *Comm) function(name string) (uintptr, error) {
	fn, ok := c.fns[name]
	if !ok {
		if err := c.drv.check("cuModuleGetFunction "+name, c.drv.moduleFunc(&fn, c.mod, name)); err != nil {
			return 0, err
		}
		c.fns[name] = fn
	}
	return fn, nil
}

// addrs are the communicator's ring addresses; the caller fills in the user buffers.
func (c *Comm) addrs() ringAddrs {
	n := c.cfg.Ranks
	return ringAddrs{send: make([]uint64, n), recv: make([]uint64, n), abort: c.abort,
		region:   func(ch, from int) uint64 { return c.regions + uint64((ch*n+from)*c.cfg.Buffers.RegionBytes()) },
		sendStep: func(ch, r int) uint64 { return c.steps + uint64(((ch*n+r)*2)*8) },
		recvStep: func(ch, r int) uint64 { return c.steps + uint64(((ch*n+r)*2+1)*8) },
		ring:     func(ch int) uint64 { return c.rings + uint64(ch*n*4) }}
}

// writeWorks copies the call's Works (Ring's or Tree's) to the device.
func (c *Comm) writeWorks(pc *prepared, a ringAddrs) error {
	n := c.cfg.Ranks
	works := ringWorks(pc.rc, a)
	if pc.algo == "tree" {
		works = treeWorks(pc.rc, treeAddrs{send: a.send, recv: a.recv, abort: c.abort,
			region: func(ch, child, dir int) uint64 {
				return c.tregs + uint64(((ch*n+child)*2+dir)*c.cfg.Buffers.RegionBytes())
			},
			step: func(ch, child, dir, side int) uint64 { return c.tsteps + uint64((((ch*n+child)*2+dir)*2+side)*8) },
		}, c.trees)
	}
	return c.drv.check("cuMemcpyHtoD", c.drv.memcpyHtoD(c.works, unsafe.Pointer(&works[0]), uint64(len(works))*uint64(unsafe.Sizeof(Work{}))))
}

// launch starts one call: every rank's blocks in one grid, on the default stream.
func (c *Comm) launch(fn uintptr, name string) error {
	arg := c.works
	params := []unsafe.Pointer{unsafe.Pointer(&arg)}
	err := c.drv.check("cuLaunchKernel "+name, c.drv.launch(fn, uint32(c.cfg.Ranks*c.cfg.Channels), 1, 1, uint32(c.cfg.Threads), 1, 1, 0, 0,
		unsafe.Pointer(&params[0]), nil))
	runtime.KeepAlive(params)
	return err
}

// Time runs call warmup times, then iters times, on device buffers it allocates for the purpose
// (nothing is copied in or checked: call's buffers are not used), in place (AllReduce, Broadcast
// and Reduce; the others run out of place) or out of place, and returns the mean microseconds per
// call from the first timed launch until the last has finished (cuCtxSynchronize).
func (c *Comm) Time(call Call, inPlace bool, warmup, iters int) (float64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == 0 {
		return 0, errors.New("cuda: communicator closed")
	}
	if iters < 1 || warmup < 0 {
		return 0, fmt.Errorf("cuda: %d warmup and %d timed iterations", warmup, iters)
	}
	pc, err := c.prepare(call, true)
	if err != nil {
		return 0, err
	}
	pc.rc.inPlace = inPlace && pc.inElems == pc.outElems
	es := call.Dtype.Size()
	var us float64
	err = c.locked(func() error {
		fn, err := c.function(pc.name)
		if err != nil {
			return err
		}
		a := c.addrs()
		var bufs []uint64
		defer func() {
			for _, p := range bufs {
				c.drv.memFree(p)
			}
		}()
		for r := range c.cfg.Ranks {
			for _, x := range []struct {
				p     *uint64
				elems int
			}{{&a.send[r], pc.inElems}, {&a.recv[r], pc.outElems}} {
				if x.p == &a.recv[r] && pc.rc.inPlace {
					a.recv[r] = a.send[r]
					continue
				}
				if err := c.drv.check("cuMemAlloc", c.drv.memAlloc(x.p, uint64(x.elems*es))); err != nil {
					return err
				}
				bufs = append(bufs, *x.p)
				if err := c.drv.check("cuMemsetD8", c.drv.memsetD8(*x.p, 0, uint64(x.elems*es))); err != nil {
					return err
				}
			}
		}
		if err := c.writeWorks(pc, a); err != nil {
			return err
		}
		for range warmup {
			if err := c.launch(fn, pc.name); err != nil {
				return err
			}
		}
		if err := c.drv.check("cuCtxSynchronize", c.drv.ctxSync()); err != nil {
			return err
		}
		start := time.Now()
		for range iters {
			if err := c.launch(fn, pc.name); err != nil {
				return err
			}
		}
		if err := c.drv.check("cuCtxSynchronize", c.drv.ctxSync()); err != nil {
			return err
		}
		us = time.Since(start).Seconds() * 1e6 / float64(iters)
		return nil
	})
	return us, err
}

func collName(c costmodel.Coll) string {
	switch c {
	case costmodel.AllReduce:
		return "allreduce"
	case costmodel.AllGather:
		return "allgather"
	case costmodel.ReduceScatter:
		return "reducescatter"
	case costmodel.Broadcast:
		return "broadcast"
	}
	return "reduce"
}
