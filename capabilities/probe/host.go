package probe

import (
	"bufio"
	"errors"
	"fmt"
	"github.com/collplan/collplan/capabilities"
	"io"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
)

// The host CPU probe: pure Go over Linux's /proc/cpuinfo and /sys/devices/system/node.

// HostProbe is what ProbeHost learns about the host CPUs.
type HostProbe struct {
	Cores     int // logical CPUs: the "processor" entries of /proc/cpuinfo
	Arch      capabilities.CPUArch
	Vendor    capabilities.CPUVendor // capabilities.VendorUndefined on ARM and POWER, as in NCCL
	NUMANodes int                    // node directories under /sys/devices/system/node; 1 when there are none
	ModelName string                 // e.g. "Intel(R) Xeon(R) Platinum 8480+", "ARM Neoverse-V2", "POWER9, altivec supported"
}

const (
	procCPUInfo = "/proc/cpuinfo"
	sysNodeDir  = "/sys/devices/system/node"
)

// ProbeHost reads /proc/cpuinfo (ParseCPUInfo) and counts the NUMA nodes in
// /sys/devices/system/node. When /proc/cpuinfo cannot be read or parsed (not Linux, a restricted
// container) it returns an error together with a best-effort HostProbe: runtime.NumCPU cores, the
// architecture of runtime.GOARCH, capabilities.VendorUndefined and the NUMA count.
func ProbeHost() (HostProbe, error) { return probeHost(procCPUInfo, sysNodeDir) }

func probeHost(cpuinfo, nodeDir string) (HostProbe, error) {
	h := HostProbe{NUMANodes: countNUMANodes(nodeDir), Vendor: capabilities.VendorUndefined}
	f, err := os.Open(cpuinfo)
	if err == nil {
		defer f.Close()
		h.Arch, h.Vendor, h.ModelName, h.Cores, err = ParseCPUInfo(f)
	}
	if err != nil {
		h.Cores, h.Vendor, h.ModelName = runtime.NumCPU(), capabilities.VendorUndefined, ""
		h.Arch, _ = archFromGOARCH(runtime.GOARCH)
		return h, fmt.Errorf("probe: host probe: %w", err)
	}
	return h, nil
}

var nodeDirName = regexp.MustCompile(`^node[0-9]+$`)

// countNUMANodes counts nodeN directories in dir; a missing or empty dir is one node.
func countNUMANodes(dir string) int {
	entries, err := os.ReadDir(dir)
	n := 0
	if err == nil {
		for _, e := range entries {
			if e.IsDir() && nodeDirName.MatchString(e.Name()) {
				n++
			}
		}
	}
	return max(n, 1)
}

// ParseCPUInfo reads a Linux /proc/cpuinfo.
//
//   - cores counts the "processor : N" entries (logical CPUs); a file without any is an error.
//   - arch is x86 when there is a vendor_id, ARM when there is a "CPU implementer" or
//     "CPU architecture", POWER when "cpu" names a POWER or PPC processor; otherwise it comes from
//     runtime.GOARCH (amd64, 386 -> x86; ppc64, ppc64le -> power; arm64, arm -> arm), and any
//     other GOARCH is an error.
//   - vendor maps vendor_id as NCCL does: GenuineIntel -> capabilities.VendorIntel, AuthenticAMD and
//     HygonGenuine -> capabilities.VendorAMD, CentaurHauls and "  Shanghai  " -> capabilities.VendorZhaoxin; different
//     vendor_ids across processors -> capabilities.VendorMixed; an unknown one, or an ARM or POWER host ->
//     capabilities.VendorUndefined.
//   - model is the "model name" (x86; distinct names joined by " / "), the implementer and part
//     (ARM, e.g. "ARM Neoverse-V2"), or the "cpu" line (POWER, e.g. "POWER9, altivec supported").
//
// ParseCPUInfo reads nothing but r and runtime.GOARCH.
func ParseCPUInfo(r io.Reader) (arch capabilities.CPUArch, vendor capabilities.CPUVendor, model string, cores int, err error) {
	return parseCPUInfo(r, runtime.GOARCH)
}

// cpuVendors is NCCL's kvDictCpuVendor, keyed by the trimmed vendor_id.
var cpuVendors = map[string]capabilities.CPUVendor{
	"GenuineIntel": capabilities.VendorIntel,
	"AuthenticAMD": capabilities.VendorAMD,
	"HygonGenuine": capabilities.VendorAMD,
	"CentaurHauls": capabilities.VendorZhaoxin,
	"Shanghai":     capabilities.VendorZhaoxin, // "  Shanghai  " in CPUID
}

// armImplementers and armParts name the ARM CPUs NCCL hosts commonly have ("CPU implementer" and
// "CPU part", from the Linux arm64 cputype.h).
var (
	armImplementers = map[string]string{"0x41": "ARM", "0x42": "Broadcom", "0x43": "Cavium", "0x46": "Fujitsu",
		"0x48": "HiSilicon", "0x4e": "NVIDIA", "0x50": "APM", "0x51": "Qualcomm", "0x61": "Apple", "0xc0": "Ampere"}
	armParts = map[string]string{"0x41/0xd0c": "Neoverse-N1", "0x41/0xd40": "Neoverse-V1",
		"0x41/0xd49": "Neoverse-N2", "0x41/0xd4f": "Neoverse-V2", "0x41/0xd84": "Neoverse-V3",
		"0x41/0xd8e": "Neoverse-N3", "0x48/0xd01": "TaiShan-v110", "0xc0/0xac3": "AmpereOne"}
)

func parseCPUInfo(r io.Reader, goarch string) (arch capabilities.CPUArch, vendor capabilities.CPUVendor, model string, cores int, err error) {
	var (
		vendorIDs, models []string // distinct, in order of appearance
		armImpl, armPart  string
		powerCPU          string
		isX86, isARM      bool
	)
	addDistinct := func(list *[]string, v string) {
		for _, x := range *list {
			if x == v {
				return
			}
		}
		*list = append(*list, v)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch key {
		case "processor":
			if _, err := strconv.Atoi(val); err == nil {
				cores++
			}
		case "vendor_id":
			isX86 = true
			addDistinct(&vendorIDs, val)
		case "model name":
			if val != "" {
				addDistinct(&models, val)
			}
		case "CPU implementer":
			isARM = true
			if armImpl == "" {
				armImpl = strings.ToLower(val)
			}
		case "CPU architecture":
			isARM = true
		case "CPU part":
			if armPart == "" {
				armPart = strings.ToLower(val)
			}
		case "cpu":
			if u := strings.ToUpper(val); powerCPU == "" && (strings.HasPrefix(u, "POWER") || strings.HasPrefix(u, "PPC")) {
				powerCPU = val
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, capabilities.VendorUndefined, "", 0, fmt.Errorf("reading cpuinfo: %w", err)
	}
	if cores == 0 {
		return 0, capabilities.VendorUndefined, "", 0, errors.New("cpuinfo has no processor entries")
	}

	vendor = capabilities.VendorUndefined
	switch {
	case isX86:
		arch = capabilities.ArchX86
		vendor = x86Vendor(vendorIDs)
	case isARM:
		arch = capabilities.ArchARM
	case powerCPU != "":
		arch = capabilities.ArchPower
	default:
		if arch, err = archFromGOARCH(goarch); err != nil {
			return 0, capabilities.VendorUndefined, "", 0, err
		}
	}

	switch {
	case len(models) > 0:
		model = strings.Join(models, " / ")
	case arch == capabilities.ArchARM && armImpl != "":
		model = armModel(armImpl, armPart)
	case arch == capabilities.ArchPower:
		model = powerCPU
	}
	return arch, vendor, model, cores, nil
}

// x86Vendor maps the distinct vendor_ids of an x86 host; ids of different vendors make it mixed.
func x86Vendor(ids []string) capabilities.CPUVendor {
	vendor := capabilities.VendorUndefined
	for i, id := range ids {
		v, ok := cpuVendors[id]
		if !ok {
			v = capabilities.VendorUndefined
		}
		if i > 0 && v != vendor {
			return capabilities.VendorMixed
		}
		vendor = v
	}
	return vendor
}

// armModel names an ARM CPU from its implementer and part codes.
func armModel(impl, part string) string {
	name, ok := armImplementers[impl]
	if !ok {
		name = "implementer " + impl
	}
	if p, ok := armParts[impl+"/"+part]; ok {
		return name + " " + p
	}
	if part != "" {
		return name + " part " + part
	}
	return name
}

// archFromGOARCH is the CPU architecture class of a Go GOARCH.
func archFromGOARCH(goarch string) (capabilities.CPUArch, error) {
	switch goarch {
	case "amd64", "386":
		return capabilities.ArchX86, nil
	case "ppc64", "ppc64le":
		return capabilities.ArchPower, nil
	case "arm64", "arm":
		return capabilities.ArchARM, nil
	}
	return 0, fmt.Errorf("cpu architecture %q is none of x86, power and arm", goarch)
}
