// Package probe reads the machine: GPUs through NVML (go-nvml, only in the cgo build) and the CPU
// host from /proc and /sys. It is the one seam between collplan and the hardware, kept out of the
// capabilities package so that the pricing core (costmodel, planner) links neither cgo nor NVML.
package probe

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The GPU probe's seam. This file is pure Go: it holds the probe logic over a small nvmlLib
// interface. nvml.go (cgo, Linux) adapts go-nvml to that interface, and nonvml.go
// stands in everywhere else, so the package builds and tests with CGO_ENABLED=0.

// ErrNoNVML says NVML cannot be used here: built without cgo, the library is missing, or nvmlInit
// failed. Errors from ProbeGPUs wrap it and say which.
var ErrNoNVML = errors.New("probe: no NVML")

// GPUInfo is what the probe learns about one GPU.
type GPUInfo struct {
	Index             int    // NVML device index (PCI bus order; CUDA's order may differ)
	Name              string // e.g. "NVIDIA H100 80GB HBM3"
	ComputeCapability int    // major*10 + minor, e.g. 90 for 9.0
	NVLinks           int    // active NVLink links
	// FabricState is the GPU fabric (NVSwitch fabric manager) state: "not supported", "not started",
	// "in progress", "completed", or "failed" (completed with an error status); "" when NVML could
	// not say.
	FabricState string
}

// GPUProbe is the result of ProbeGPUs.
type GPUProbe struct {
	GPUs []GPUInfo
	// NVSwitch is inferred: some GPU is fabric-attached (fabric state other than "not supported"
	// and "") or has an active NVLink whose remote end is a switch.
	NVSwitch bool
}

// DefaultProbeTimeout bounds ProbeGPUs. NVML calls can block on a wedged driver.
const DefaultProbeTimeout = 30 * time.Second

// maxNVLinks is how many links the probe asks about, NVML_NVLINK_MAX_LINKS in the go-nvml header
// (18 before Blackwell). NVML answers "invalid argument" past the device's own count.
const maxNVLinks = 36

// errNotSupported is what an nvmlDevice returns when NVML or the driver lacks the query.
var errNotSupported = errors.New("not supported")

// nvmlLib is the part of NVML the probe uses.
type nvmlLib interface {
	// Init starts NVML; its error wraps ErrNoNVML and says why. Shutdown is only called after a
	// successful Init.
	Init() error
	Shutdown() error
	DeviceCount() (int, error)
	Device(index int) (nvmlDevice, error)
}

// fabricInfo is NVML's GPU fabric state and status (nvmlGpuFabricInfo_t).
type fabricInfo struct {
	State    int  // NVML_GPU_FABRIC_STATE_*: 0 not supported, 1 not started, 2 in progress, 3 completed
	StatusOK bool // status == NVML_SUCCESS
}

// nvmlDevice is the part of an NVML device handle the probe uses. Methods return errNotSupported
// (possibly wrapped) when the query does not exist on this GPU or driver.
type nvmlDevice interface {
	Name() (string, error)
	ComputeCapability() (major, minor int, err error)
	NVLinkActive(link int) (bool, error)
	NVLinkToSwitch(link int) (bool, error)
	Fabric() (fabricInfo, error)
}

// ProbeGPUs asks NVML for the GPUs of this machine, within DefaultProbeTimeout. Without NVML (no
// cgo, no libnvidia-ml.so.1, nvmlInit failing, e.g. no driver) it returns an error wrapping
// ErrNoNVML that says why. A machine with NVML and no GPU gives an empty probe and no error.
// ProbeGPUs never panics.
func ProbeGPUs() (GPUProbe, error) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultProbeTimeout)
	defer cancel()
	return ProbeGPUsContext(ctx)
}

// ProbeGPUsContext is ProbeGPUs bounded by ctx instead of DefaultProbeTimeout. When ctx ends first
// it returns ctx's error; the NVML calls then finish (and shut NVML down) in the background.
func ProbeGPUsContext(ctx context.Context) (GPUProbe, error) {
	return probeWithContext(ctx, openNVML)
}

// probeMu serializes GPU probes, so that NVML is never driven from two probes at once. A probe that
// hangs keeps it; later probes then end at their own deadline.
var probeMu sync.Mutex

type probeResult struct {
	p   GPUProbe
	err error
}

// probeWithContext runs probeGPUs on the library open returns, in a goroutine so that ctx bounds
// it, and turns a panic into an error.
func probeWithContext(ctx context.Context, open func() (nvmlLib, error)) (GPUProbe, error) {
	if err := ctx.Err(); err != nil {
		return GPUProbe{}, fmt.Errorf("probe: gpu probe: %w", err)
	}
	done := make(chan probeResult, 1) // buffered: a late probe never blocks
	go func() {
		var res probeResult
		probeMu.Lock()
		defer func() {
			probeMu.Unlock()
			if v := recover(); v != nil {
				res = probeResult{err: fmt.Errorf("probe: gpu probe panicked: %v", v)}
			}
			done <- res
		}()
		lib, err := open()
		if err != nil {
			res.err = err
			return
		}
		res.p, res.err = probeGPUs(lib)
	}()
	select {
	case res := <-done:
		return res.p, res.err
	case <-ctx.Done():
		return GPUProbe{}, fmt.Errorf("probe: gpu probe: %w", ctx.Err())
	}
}

// probeGPUs is the probe proper: Init, every device, Shutdown.
func probeGPUs(lib nvmlLib) (p GPUProbe, err error) {
	if err := lib.Init(); err != nil {
		return GPUProbe{}, err
	}
	defer func() {
		if serr := lib.Shutdown(); serr != nil && err == nil {
			p, err = GPUProbe{}, fmt.Errorf("probe: nvml shutdown: %w", serr)
		}
	}()
	n, err := lib.DeviceCount()
	if err != nil {
		return GPUProbe{}, fmt.Errorf("probe: nvml device count: %w", err)
	}
	for i := 0; i < n; i++ {
		g, toSwitch, err := probeDevice(lib, i)
		if err != nil {
			return GPUProbe{}, err
		}
		p.GPUs = append(p.GPUs, g)
		if toSwitch || (g.FabricState != "" && g.FabricState != "not supported") {
			p.NVSwitch = true
		}
	}
	return p, nil
}

// probeDevice reads one GPU. Name and compute capability are required; NVLink and fabric queries
// that fail leave their fields at "none" / "".
func probeDevice(lib nvmlLib, i int) (g GPUInfo, toSwitch bool, err error) {
	d, err := lib.Device(i)
	if err != nil {
		return g, false, fmt.Errorf("probe: nvml device %d: %w", i, err)
	}
	g.Index = i
	if g.Name, err = d.Name(); err != nil {
		return g, false, fmt.Errorf("probe: nvml device %d name: %w", i, err)
	}
	major, minor, err := d.ComputeCapability()
	if err != nil {
		return g, false, fmt.Errorf("probe: nvml device %d compute capability: %w", i, err)
	}
	g.ComputeCapability = major*10 + minor
	for l := 0; l < maxNVLinks; l++ {
		if up, err := d.NVLinkActive(l); err != nil || !up {
			continue // past the device's links, no NVLink at all, or link down
		}
		g.NVLinks++
		if sw, err := d.NVLinkToSwitch(l); err == nil && sw {
			toSwitch = true
		}
	}
	g.FabricState = fabricState(d.Fabric())
	return g, toSwitch, nil
}

// fabricState names NVML's GPU fabric state.
func fabricState(f fabricInfo, err error) string {
	if errors.Is(err, errNotSupported) {
		return "not supported"
	}
	if err != nil {
		return ""
	}
	switch f.State {
	case 0:
		return "not supported"
	case 1:
		return "not started"
	case 2:
		return "in progress"
	case 3:
		if !f.StatusOK {
			return "failed"
		}
		return "completed"
	}
	return fmt.Sprintf("state %d", f.State)
}
