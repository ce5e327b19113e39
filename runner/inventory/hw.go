package inventory

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/pci"
	"github.com/jaypipes/ghw"
	"github.com/jaypipes/pcidb"
)

// PCIIDsPaths are where the image carries pci.ids (initramfs/cure.yaml),
// relative to the root; the first that exists is used.
var PCIIDsPaths = []string{"usr/share/misc/pci.ids", "usr/share/misc/pci.ids.gz", "usr/share/hwdata/pci.ids"}

// NVIDIA NVSwitch functions are PCI bridges of class 0x0680 ("other bridge")
// from vendor 0x10de; GPUs are display controllers (class 0x03).
const (
	classDisplay     = 0x03
	classOtherBridge = 0x0680
)

// ghwOpts are the options every ghw call gets (CPU, topology, memory):
// the fixture or real root, no external tools (the ramdisk has none),
// warnings through slog.
func ghwOpts(o *Options) []any {
	return []any{ghw.WithChroot(o.Root), ghw.WithDisableTools(), ghw.WithLogger(o.Log.With("lib", "ghw"))}
}

// loadPCIDB reads the image's pci.ids. Without one an empty database
// stands in: names are empty, ids still come through.
func loadPCIDB(o *Options) *pcidb.PCIDB {
	for _, p := range PCIIDsPaths {
		full := o.path(p)
		if _, err := os.Stat(full); err != nil {
			continue
		}
		pciDBs.Lock()
		db, ok := pciDBs.m[full]
		pciDBs.Unlock()
		if ok {
			return db
		}
		db, err := pcidb.New(pcidb.WithPath(full)) // network fetch is off unless PCIDB_ENABLE_NETWORK_FETCH is set
		if err == nil {
			pciDBs.Lock()
			pciDBs.m[full] = db
			pciDBs.Unlock()
			return db
		}
		o.Log.Warn("inventory: pci.ids unreadable", "path", full, "err", err)
	}
	o.Log.Warn("inventory: no pci.ids in the image; PCI devices are listed by id only", "tried", strings.Join(PCIIDsPaths, ", "))
	return &pcidb.PCIDB{Classes: map[string]*pcidb.Class{}, Vendors: map[string]*pcidb.Vendor{}, Products: map[string]*pcidb.Product{}}
}

// pciDBs are the parsed pci.ids by path: the image's never changes while
// it runs, and Preload parses it while the drivers load.
var pciDBs = struct {
	sync.Mutex
	m map[string]*pcidb.PCIDB
}{m: map[string]*pcidb.PCIDB{}}

// Preload parses pci.ids under root ahead of Collect, which then finds it
// parsed: the runner calls it while drivers load, when one of the two
// vCPUs of a QEMU node is idle (under emulation the parse was about a
// quarter of the inventory's time before Hello).
func Preload(root string, log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	loadPCIDB(&Options{Root: root, Log: log})
}

// pciDevice is what the inventory keeps of one PCI function.
type pciDevice struct {
	Address        string
	Vendor, Device uint32
	Class          uint32 // 0xCCSSPP
	Name           string // pci.ids product name, "" when unknown
	NUMANode       int32
	Driver         string
}

// pciDevices lists the PCI bus through tools/pci (the one sysfs walk),
// names from pci.ids, sorted by address. A function whose vendor cannot be
// read is logged and left out; the others are still listed.
func pciDevices(o *Options, db *pcidb.PCIDB) ([]pciDevice, error) {
	fns, err := pci.Functions(o.Root)
	if err != nil {
		return nil, fmt.Errorf("pci: %w", err)
	}
	// A machine with one NUMA node reports no node per device (as the
	// kernel's -1 would say): only with several is numa_node meaningful.
	nodes, _ := filepath.Glob(o.path("sys/devices/system/node/node[0-9]*"))
	numa := len(nodes) != 1
	out := make([]pciDevice, 0, len(fns))
	for _, f := range fns {
		v, err := f.Vendor()
		if err != nil {
			o.Log.Warn("inventory: PCI function not listed", "address", f.Addr, "err", err)
			continue
		}
		p := pciDevice{Address: f.Addr, Vendor: uint32(v), NUMANode: -1}
		if d, err := f.Device(); err == nil {
			p.Device = uint32(d)
		}
		if c, err := f.Class(); err == nil {
			p.Class = c
		}
		if numa {
			if b, err := f.ReadFile("numa_node"); err == nil {
				if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 32); err == nil && n >= 0 {
					p.NUMANode = int32(n)
				}
			}
		}
		if l, err := os.Readlink(filepath.Join(f.Dir, "driver")); err == nil {
			p.Driver = filepath.Base(l)
		}
		if prod := db.Products[fmt.Sprintf("%04x%04x", v, p.Device)]; prod != nil && prod.Name != "" {
			p.Name = strings.ToValidUTF8(prod.Name, "\uFFFD")
		}
		out = append(out, p)
	}
	return out, nil
}

// gpusAndSwitches picks NVIDIA GPUs and NVSwitches from the PCI list.
//
// ghw.GPU is not used: it lists cards from /sys/class/drm, which a data
// centre GPU has only once nvidia-drm is loaded, never in CURE before the
// driver overlay (and not at all without it); the PCI bus is what is there.
func gpusAndSwitches(devs []pciDevice) ([]*curev1.Gpu, []*curev1.PciDevice) {
	var gpus []*curev1.Gpu
	var sw []*curev1.PciDevice
	for _, d := range devs {
		if d.Vendor != 0x10de {
			continue
		}
		switch {
		case d.Class>>16 == classDisplay:
			gpus = append(gpus, &curev1.Gpu{Index: uint32(len(gpus)), Name: d.Name, PciAddress: d.Address,
				PciDeviceId: d.Device, NumaNode: d.NUMANode})
		case d.Class>>8 == classOtherBridge:
			sw = append(sw, &curev1.PciDevice{Address: d.Address, VendorId: d.Vendor, DeviceId: d.Device, Name: d.Name, Class: d.Class})
		}
	}
	return gpus, sw
}

// cpuAndTopology reads sockets (ghw.CPU) and NUMA nodes (ghw.Topology).
func cpuAndTopology(o *Options) ([]*curev1.Processor, []*curev1.NumaNode, error) {
	info, err := ghw.CPU(ghwOpts(o)...)
	if err != nil {
		return nil, nil, fmt.Errorf("ghw cpu: %w", err)
	}
	var procs []*curev1.Processor
	for _, p := range info.Processors {
		procs = append(procs, &curev1.Processor{Id: uint32(p.ID), Vendor: p.Vendor,
			Model: strings.ToValidUTF8(strings.TrimSpace(p.Model), "\uFFFD"), Cores: p.TotalCores, Threads: p.TotalHardwareThreads})
	}
	topo, err := ghw.Topology(ghwOpts(o)...)
	if err != nil {
		return procs, nil, fmt.Errorf("ghw topology: %w", err)
	}
	var nodes []*curev1.NumaNode
	for _, n := range topo.Nodes {
		nn := &curev1.NumaNode{Id: uint32(n.ID), Cores: uint32(len(n.Cores))}
		if n.Memory != nil && n.Memory.TotalUsableBytes > 0 {
			nn.MemoryBytes = uint64(n.Memory.TotalUsableBytes)
		}
		nodes = append(nodes, nn)
	}
	return procs, nodes, nil
}

// memory is MemTotal (usable) and the installed memory (the kernel's memory
// blocks; ghw falls back to the usable size when they are not exported).
func memory(o *Options) (usable, physical uint64, err error) {
	m, err := ghw.Memory(ghwOpts(o)...)
	if err != nil {
		return 0, 0, fmt.Errorf("ghw memory: %w", err)
	}
	if m.TotalUsableBytes <= 0 {
		return 0, 0, fmt.Errorf("ghw memory: no MemTotal in %s", o.path("proc/meminfo"))
	}
	return uint64(m.TotalUsableBytes), uint64(max(m.TotalPhysicalBytes, 0)), nil
}

// nicPCI fills the model and PCI ids of NICs from the PCI list.
func nicPCI(nics []*curev1.NetInterface, devs []pciDevice) {
	by := map[string]pciDevice{}
	for _, d := range devs {
		by[d.Address] = d
	}
	for _, n := range nics {
		if d, ok := by[n.PciAddress]; ok {
			n.Model, n.PciVendorId, n.PciDeviceId = d.Name, d.Vendor, d.Device
		}
	}
}
