package manifests

import (
	"slices"

	"gopkg.in/yaml.v3"
)

// Hardware is what a node of the SKU must have. Every part is optional; an
// absent part is not checked. The runner's hardware phase compares the
// node's inventory with it (tools/checks/hardware) before anything is
// written, and a diagnostic run does the same before its suite.
type Hardware struct {
	CPU        *CPUSpec      `yaml:"cpu,omitempty"`
	Memory     *MemorySpec   `yaml:"memory,omitempty"`
	GPUs       *GPUSpec      `yaml:"gpus,omitempty"`
	NVSwitches *NVSwitchSpec `yaml:"nvswitches,omitempty"`
	// NICs are groups of network ports by model; ports no group matches
	// are not checked.
	NICs []NICSpec  `yaml:"nics,omitempty"`
	NVMe []NVMeSpec `yaml:"nvme,omitempty"`
}

// CPUSpec: sockets and the model string (CPUID brand, a path.Match glob).
type CPUSpec struct {
	Model   string `yaml:"model,omitempty"`
	Sockets int    `yaml:"sockets,omitempty"`
	// Cores is the physical core count of the whole node (all sockets).
	Cores int `yaml:"cores,omitempty"`
}

// MemorySpec: populated DIMMs (SMBIOS type 17) and their size.
type MemorySpec struct {
	DIMMs    int      `yaml:"dimms,omitempty"`
	DIMMSize ByteSize `yaml:"dimmSize,omitempty"`
	// Locators, when given, are the slots that must be populated (SMBIOS
	// Device Locator, e.g. "A1" or "CPU0_DIMM_B3"); without them an empty
	// slot is named only when fewer than DIMMs are populated.
	Locators []string `yaml:"locators,omitempty"`
}

// GPUSpec: NVIDIA GPUs on the PCI bus.
type GPUSpec struct {
	Count int `yaml:"count,omitempty"`
	// Model is a glob over the PCI device name from pci.ids ("*H100*SXM5*").
	Model string `yaml:"model,omitempty"`
	// PCIID is "vendor:device" in hex ("10de:2901"), for GPUs newer than
	// the image's pci.ids.
	PCIID string `yaml:"pciId,omitempty"`
	// Addresses are the expected PCI addresses in GPU index order, so a
	// missing GPU is named by index and slot ("gpu/6 missing at PCI 0000:c1:00.0").
	Addresses []string `yaml:"addresses,omitempty"`
	// PCIe is the link every GPU must negotiate.
	PCIe *PCIeSpec `yaml:"pcie,omitempty"`
	// NVLinks is how many NVLinks every GPU must have up (18 on H100,
	// H200 and B200 SXM). Declared, a GPU that answers "Not Supported" for
	// NVLink (a PCIe card, a GPU passed through alone) fails the GPU
	// checks; absent, such a GPU is a SKIP.
	NVLinks int `yaml:"nvlinks,omitempty"`
	// Fabric: every GPU must be registered with the NVLink fabric (the
	// fabric manager's work on an NVSwitch board): registration completed
	// and successful, healthy, all GPUs in one clique.
	Fabric bool `yaml:"fabric,omitempty"`
}

// NVSwitchSpec: NVIDIA NVSwitch functions on the PCI bus.
type NVSwitchSpec struct {
	Count int       `yaml:"count"`
	PCIe  *PCIeSpec `yaml:"pcie,omitempty"`
}

// PCIeSpec is the PCIe link a group of devices must negotiate: at least
// this generation and at least this many lanes (each optional). A device
// that trained below it (a bad riser, cable or slot, a BIOS bifurcation
// setting) is named with its negotiated and capable link.
type PCIeSpec struct {
	Gen   int `yaml:"gen,omitempty"`   // 1 (2.5 GT/s) to 6 (64 GT/s)
	Width int `yaml:"width,omitempty"` // lanes: 1, 2, 4, 8, 12, 16 or 32
}

// NICSpec is a group of network ports of one model.
type NICSpec struct {
	// Model is a glob over the PCI device name ("*ConnectX-7*"); PCIID
	// ("15b3:1021") is exact. At least one is set; both must match.
	Model string `yaml:"model,omitempty"`
	PCIID string `yaml:"pciId,omitempty"`
	Count int    `yaml:"count,omitempty"`
	// SpeedMbps is the link speed every port of the group must negotiate.
	SpeedMbps int `yaml:"speedMbps,omitempty"`
	// PCIe is the PCIe link every port's function must negotiate.
	PCIe *PCIeSpec `yaml:"pcie,omitempty"`
}

// NVMeSpec is a group of NVMe controllers of one model.
type NVMeSpec struct {
	// Model is a glob over the Identify model number.
	Model string `yaml:"model"`
	Count int    `yaml:"count,omitempty"`
	// MinSize is the smallest acceptable capacity of each drive (its
	// namespaces together); drives are sold by decimal size ("7.68TB").
	MinSize ByteSize `yaml:"minSize,omitempty"`
	// PCIe is the link every drive of the group must negotiate.
	PCIe *PCIeSpec `yaml:"pcie,omitempty"`
}

var (
	pciIDRE   = lazyRegexp(`^[0-9a-f]{4}:[0-9a-f]{4}$`)
	pciAddrRE = lazyRegexp(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	// locatorRE: SMBIOS strings are free text; refuse only what cannot be a
	// slot name and would make component ids unreadable.
	locatorRE = lazyRegexp(`^[\x21-\x7e]([\x20-\x7e]{0,62}[\x21-\x7e])?$`)
)

// Limits keep a typo ("count: 80000") from reading as an expectation.
const (
	maxDevices = 4096
	maxSpeed   = 1_600_000 // Mb/s: 1.6 Tb/s
)

func (d *decoder) hardware(n *yaml.Node, p string) *Hardware {
	f := d.mapping(n, p, "cpu", "memory", "gpus", "nvswitches", "nics", "nvme")
	h := &Hardware{}
	if f.ok && f.count() == 0 {
		d.errorf(n, p, "is empty: declare at least one of cpu, memory, gpus, nvswitches, nics, nvme (or remove spec.hardware)")
	}
	if v := f.get("cpu"); v != nil {
		c := d.mapping(v, join(p, "cpu"), "model", "sockets", "cores")
		h.CPU = &CPUSpec{}
		var mv *yaml.Node
		h.CPU.Model, mv = c.str("model", false)
		d.checkGlob(mv, join(p, "cpu.model"), h.CPU.Model)
		h.CPU.Sockets = c.devices("sockets", 1)
		h.CPU.Cores = c.devices("cores", 1)
		d.nonEmpty(c, v, join(p, "cpu"))
	}
	if v := f.get("memory"); v != nil {
		mp := join(p, "memory")
		m := d.mapping(v, mp, "dimms", "dimmSize", "locators")
		h.Memory = &MemorySpec{DIMMs: m.devices("dimms", 1), DIMMSize: m.byteSize("dimmSize")}
		h.Memory.Locators = d.uniqueList(m, mp, "locators", "locator", locatorRE, "is not a DIMM locator (printable ASCII, no leading or trailing space)")
		if h.Memory.DIMMs > 0 && len(h.Memory.Locators) > h.Memory.DIMMs {
			d.errorf(m.vals["locators"], join(mp, "locators"), "lists %d slots but dimms is %d", len(h.Memory.Locators), h.Memory.DIMMs)
		}
		d.nonEmpty(m, v, mp)
	}
	if v := f.get("gpus"); v != nil {
		gp := join(p, "gpus")
		g := d.mapping(v, gp, "count", "model", "pciId", "addresses", "pcie", "nvlinks", "fabric")
		h.GPUs = &GPUSpec{Count: g.devices("count", 1)}
		var mv *yaml.Node
		h.GPUs.Model, mv = g.str("model", false)
		d.checkGlob(mv, join(gp, "model"), h.GPUs.Model)
		h.GPUs.PCIID = d.pciID(g, gp)
		h.GPUs.Addresses = d.pciAddresses(g, gp)
		h.GPUs.PCIe = d.pcie(g, gp)
		if g.has("nvlinks") {
			// NVML_NVLINK_MAX_LINKS is 18; a later part may have more.
			if h.GPUs.NVLinks = g.devices("nvlinks", 1); h.GPUs.NVLinks > 64 {
				d.errorf(g.vals["nvlinks"], join(gp, "nvlinks"), "%d NVLinks per GPU: at most 64", h.GPUs.NVLinks)
			}
		}
		h.GPUs.Fabric = g.boolean("fabric")
		if g.has("count") && len(h.GPUs.Addresses) > 0 && len(h.GPUs.Addresses) != h.GPUs.Count {
			d.errorf(g.vals["addresses"], join(gp, "addresses"), "lists %d addresses but count is %d", len(h.GPUs.Addresses), h.GPUs.Count)
		}
		d.nonEmpty(g, v, gp)
	}
	if v := f.get("nvswitches"); v != nil {
		c := d.mapping(v, join(p, "nvswitches"), "count", "pcie")
		if !c.has("count") {
			c.missing("count")
		}
		h.NVSwitches = &NVSwitchSpec{Count: c.devices("count", 1), PCIe: d.pcie(c, join(p, "nvswitches"))}
	}
	for i, item := range f.seq("nics", false) {
		ip := index(join(p, "nics"), i)
		c := d.mapping(item, ip, "model", "pciId", "count", "speedMbps", "pcie")
		var s NICSpec
		var mv *yaml.Node
		s.Model, mv = c.str("model", false)
		d.checkGlob(mv, join(ip, "model"), s.Model)
		s.PCIID = d.pciID(c, ip)
		if c.ok && s.Model == "" && !c.has("pciId") {
			d.errorf(item, join(ip, "model"), "set model or pciId: which ports form this group")
		}
		s.Count = c.devices("count", 1)
		if sv := c.get("speedMbps"); sv != nil {
			if n, ok := d.integer(sv, join(ip, "speedMbps")); ok {
				if n < 10 || n > maxSpeed {
					d.errorf(sv, join(ip, "speedMbps"), "%d is not a link speed in Mb/s (want 10 to %d, e.g. 400000 for 400G)", n, maxSpeed)
				} else {
					s.SpeedMbps = int(n)
				}
			}
		}
		s.PCIe = d.pcie(c, ip)
		if c.ok && !c.has("count") && !c.has("speedMbps") && !c.has("pcie") {
			d.errorf(item, ip, "set count, speedMbps or pcie (a model alone checks nothing)")
		}
		h.NICs = append(h.NICs, s)
	}
	for i, item := range f.seq("nvme", false) {
		ip := index(join(p, "nvme"), i)
		c := d.mapping(item, ip, "model", "count", "minSize", "pcie")
		var s NVMeSpec
		var mv *yaml.Node
		s.Model, mv = c.str("model", true)
		d.checkGlob(mv, join(ip, "model"), s.Model)
		s.Count = c.devices("count", 1)
		s.MinSize = c.byteSize("minSize")
		s.PCIe = d.pcie(c, ip)
		if c.ok && !c.has("count") && !c.has("minSize") && !c.has("pcie") {
			d.errorf(item, ip, "set count, minSize or pcie (a model alone checks nothing)")
		}
		h.NVMe = append(h.NVMe, s)
	}
	return h
}

// devices reads a device count of at least min. A SKU without a device omits
// its section rather than saying "count: 0".
func (f *fields) devices(key string, min int64) int {
	v := f.get(key)
	if v == nil {
		return 0
	}
	p := join(f.path, key)
	n, ok := f.d.integer(v, p)
	if !ok {
		return 0
	}
	if n < min || n > maxDevices {
		f.d.errorf(v, p, "%d is out of range (%d to %d)", n, min, maxDevices)
		return 0
	}
	return int(n)
}

// pcieWidths are the link widths the PCIe base specification defines.
var pcieWidths = []int64{1, 2, 4, 8, 12, 16, 32}

// pcie reads the optional pcie: {gen, width} of a device group.
func (d *decoder) pcie(f *fields, p string) *PCIeSpec {
	v := f.get("pcie")
	if v == nil {
		return nil
	}
	pp := join(p, "pcie")
	c := d.mapping(v, pp, "gen", "width")
	s := &PCIeSpec{}
	if g := c.get("gen"); g != nil {
		if n, ok := d.integer(g, join(pp, "gen")); ok {
			if n < 1 || n > 6 {
				d.errorf(g, join(pp, "gen"), "%d is not a PCIe generation (1 = 2.5 GT/s to 6 = 64 GT/s)", n)
			} else {
				s.Gen = int(n)
			}
		}
	}
	if w := c.get("width"); w != nil {
		if n, ok := d.integer(w, join(pp, "width")); ok {
			if !slices.Contains(pcieWidths, n) {
				d.errorf(w, join(pp, "width"), "%d is not a PCIe link width (want 1, 2, 4, 8, 12, 16 or 32 lanes)", n)
			} else {
				s.Width = int(n)
			}
		}
	}
	d.nonEmpty(c, v, pp)
	return s
}

// nonEmpty refuses a section that sets nothing.
func (d *decoder) nonEmpty(f *fields, n *yaml.Node, p string) {
	if f.ok && f.count() == 0 {
		d.errorf(n, p, "is empty: set at least one field or remove it")
	}
}

// pciID reads an optional "vendor:device" id.
func (d *decoder) pciID(f *fields, p string) string {
	s, v := f.str("pciId", false)
	if v != nil && !pciIDRE.MatchString(s) {
		d.errorf(v, join(p, "pciId"), "%q is not a PCI id (want vendor:device in lowercase hex, e.g. 10de:2901)", s)
		return ""
	}
	return s
}

func (d *decoder) pciAddresses(f *fields, p string) []string {
	return d.uniqueList(f, p, "addresses", "address", pciAddrRE, "is not a PCI address (want domain:bus:device.function in lowercase hex, e.g. 0000:1b:00.0)")
}

// uniqueList reads the optional string list key of f: every item matches
// re (else the error says it "<bad>") and names a thing once.
func (d *decoder) uniqueList(f *fields, p, key, what string, re lazyRE, bad string) []string {
	var out []string
	seen := map[string]int{}
	for i, item := range f.seq(key, false) {
		ip := index(join(p, key), i)
		s, ok := d.scalarString(item, ip)
		if !ok {
			continue
		}
		if !re.MatchString(s) {
			d.errorf(item, ip, "%q %s", s, bad)
		} else if line, dup := seen[s]; dup {
			d.errorf(item, ip, "duplicate %s %q (first on line %d)", what, s, line)
		}
		seen[s] = item.Line
		out = append(out, s)
	}
	return out
}
