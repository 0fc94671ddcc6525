package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"
)

// DriverSoname is the CUDA driver library's soname, looked up on the library path unless
// COLLPLAN_LIBCUDA names the file.
const DriverSoname = "libcuda.so.1"

// ErrNoDriver is returned by OpenDriver when libcuda.so.1 cannot be opened: a machine without
// an NVIDIA driver. Its text is the one line collbench --device cuda prints.
var ErrNoDriver = errors.New("no CUDA driver (libcuda.so.1 not found)")

// The driver attributes the engine reads (cuda.h's CUdevice_attribute).
const (
	attrMultiprocessors = 16
	attrCCMajor         = 75
	attrCCMinor         = 76
	attrMulticast       = 132 // CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED
)

// Driver is an opened and initialised libcuda.
type Driver struct {
	Version int // cuDriverGetVersion: 1000*major + 10*minor

	init         func(flags uint32) int32
	getVersion   func(v *int32) int32
	getCount     func(n *int32) int32
	deviceGet    func(d *int32, ordinal int32) int32
	getAttribute func(v *int32, attr int32, d int32) int32
	getName      func(b *byte, n int32, d int32) int32
	errorString  func(r int32, s **byte) int32
	ctxRetain    func(ctx *uintptr, d int32) int32
	ctxRelease   func(d int32) int32
	ctxSet       func(ctx uintptr) int32
	moduleLoad   func(mod *uintptr, image *byte) int32
	moduleUnload func(mod uintptr) int32
	moduleFunc   func(fn *uintptr, mod uintptr, name string) int32
	memAlloc     func(p *uint64, n uint64) int32
	memFree      func(p uint64) int32
	memsetD8     func(p uint64, v uint8, n uint64) int32
	memcpyHtoD   func(dst uint64, src unsafe.Pointer, n uint64) int32
	memcpyDtoH   func(dst unsafe.Pointer, src uint64, n uint64) int32
	launch       func(f uintptr, gx, gy, gz, bx, by, bz, shared uint32, stream uintptr, params, extra unsafe.Pointer) int32
	ctxSync      func() int32
}

// DriverError is a driver call that returned an error code.
type DriverError struct {
	Call string
	Code int
	Name string
}

func (e *DriverError) Error() string {
	return fmt.Sprintf("cuda: %s: %s (CUresult %d)", e.Call, e.Name, e.Code)
}

// OpenDriver opens libcuda.so.1 (or the file COLLPLAN_LIBCUDA names) and initialises it. Without
// a driver the error is ErrNoDriver itself, whose text says so in one line.
func OpenDriver() (*Driver, error) {
	name := os.Getenv("COLLPLAN_LIBCUDA")
	if name == "" {
		name = DriverSoname
	}
	lib, err := dlopen(name)
	if err != nil {
		return nil, ErrNoDriver
	}
	d := &Driver{}
	if err := bind(lib, name, map[string]any{
		"cuInit": &d.init, "cuDriverGetVersion": &d.getVersion, "cuDeviceGetCount": &d.getCount,
		"cuDeviceGet": &d.deviceGet, "cuDeviceGetAttribute": &d.getAttribute, "cuDeviceGetName": &d.getName,
		"cuGetErrorString": &d.errorString, "cuDevicePrimaryCtxRetain": &d.ctxRetain,
		"cuDevicePrimaryCtxRelease_v2": &d.ctxRelease, "cuCtxSetCurrent": &d.ctxSet, "cuModuleLoadData": &d.moduleLoad,
		"cuModuleUnload": &d.moduleUnload, "cuModuleGetFunction": &d.moduleFunc,
		"cuMemAlloc_v2": &d.memAlloc, "cuMemFree_v2": &d.memFree, "cuMemsetD8_v2": &d.memsetD8,
		"cuMemcpyHtoD_v2": &d.memcpyHtoD, "cuMemcpyDtoH_v2": &d.memcpyDtoH, "cuLaunchKernel": &d.launch,
		"cuCtxSynchronize": &d.ctxSync,
	}); err != nil {
		return nil, fmt.Errorf("cuda: %v", err)
	}
	if err := d.check("cuInit", d.init(0)); err != nil {
		return nil, err
	}
	var v int32
	if err := d.check("cuDriverGetVersion", d.getVersion(&v)); err != nil {
		return nil, err
	}
	d.Version = int(v)
	return d, nil
}

func (d *Driver) check(call string, r int32) error {
	if r == 0 {
		return nil
	}
	name := "unknown error"
	var s *byte
	if d.errorString(r, &s) == 0 && s != nil {
		name = cStringAt(s)
	}
	return &DriverError{Call: call, Code: int(r), Name: name}
}

// Device describes one GPU.
type Device struct {
	Ordinal          int
	Name             string
	Major, Minor     int  // compute capability
	Multiprocessors  int  // SMs
	MulticastCapable bool // CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: NVLS can run
}

// Arch is the NVRTC architecture the engine compiles for on the device: sm_MAJORMINOR, with the
// "a" suffix on sm_90 (the architecture-specific features of Hopper).
func (dev Device) Arch() string {
	a := fmt.Sprintf("sm_%d%d", dev.Major, dev.Minor)
	if dev.Major == 9 && dev.Minor == 0 {
		a += "a"
	}
	return a
}

// Devices lists the GPUs the driver sees.
func (d *Driver) Devices() ([]Device, error) {
	var n int32
	if err := d.check("cuDeviceGetCount", d.getCount(&n)); err != nil {
		return nil, err
	}
	devs := make([]Device, 0, n)
	for i := range n {
		var h int32
		if err := d.check("cuDeviceGet", d.deviceGet(&h, i)); err != nil {
			return nil, err
		}
		attr := func(a int32) (int, error) {
			var v int32
			err := d.check("cuDeviceGetAttribute", d.getAttribute(&v, a, h))
			return int(v), err
		}
		dev := Device{Ordinal: int(i)}
		var err error
		if dev.Major, err = attr(attrCCMajor); err != nil {
			return nil, err
		}
		if dev.Minor, err = attr(attrCCMinor); err != nil {
			return nil, err
		}
		if dev.Multiprocessors, err = attr(attrMultiprocessors); err != nil {
			return nil, err
		}
		mc, err := attr(attrMulticast)
		if err != nil {
			return nil, err
		}
		dev.MulticastCapable = mc != 0
		b := make([]byte, 256)
		if err := d.check("cuDeviceGetName", d.getName(&b[0], int32(len(b)), h)); err != nil {
			return nil, err
		}
		dev.Name = goString(b)
		devs = append(devs, dev)
	}
	return devs, nil
}

// CheckModule loads image (a cubin, or NUL-free PTX text that the driver compiles) on device
// ordinal dev in its primary context, resolves every function of names, and unloads it: the
// driver's own check that a module built here runs there. The calls run on one locked OS thread
// (a context is current per thread).
func (d *Driver) CheckModule(dev int, image []byte, names []string) error {
	if len(image) == 0 {
		return errors.New("cuda: empty module image")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var h int32
	if err := d.check("cuDeviceGet", d.deviceGet(&h, int32(dev))); err != nil {
		return err
	}
	var ctx uintptr
	if err := d.check("cuDevicePrimaryCtxRetain", d.ctxRetain(&ctx, h)); err != nil {
		return err
	}
	defer d.ctxRelease(h)
	if err := d.check("cuCtxSetCurrent", d.ctxSet(ctx)); err != nil {
		return err
	}
	img := append(append([]byte(nil), image...), 0) // PTX must end in NUL; a cubin ignores it
	var mod uintptr
	if err := d.check("cuModuleLoadData", d.moduleLoad(&mod, &img[0])); err != nil {
		return err
	}
	defer d.moduleUnload(mod)
	for _, n := range names {
		var fn uintptr
		if err := d.check("cuModuleGetFunction "+n, d.moduleFunc(&fn, mod, n)); err != nil {
			return err
		}
	}
	return nil
}
