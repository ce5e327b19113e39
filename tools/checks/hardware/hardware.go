// Package hardware compares what a node has (the runner's inventory) with
// what its SKU says it must have (manifests.Hardware): a pure planner, one
// verdict per mismatch naming the component ("gpu/6 FAIL missing at PCI
// 0000:c1:00.0", "dimm/B3 FAIL absent", "nic/0 FAIL link 200000 Mb/s, want
// 400000") and one PASS per part that matched. The runner's hardware phase
// runs it as a gate before anything is written.
package hardware

import (
	"fmt"
	"path"
	"sort"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/pci"
)

// Check is the check name every verdict carries.
const Check = "hardware"

// PCIID is "vendor:device" as SKUs write it (pciId: "10de:2901").
func PCIID(vendor, device uint32) string { return fmt.Sprintf("%04x:%04x", vendor, device) }

// pciMatch: a device matches a model glob (over its pci.ids name) and an
// exact PCI id, each only when set.
func pciMatch(model, id, name string, vendor, device uint32) bool {
	return (model == "" || glob(model, name)) && (id == "" || id == PCIID(vendor, device))
}

// describe names a PCI device for messages: "name (vvvv:dddd)".
func describe(name string, vendor, device uint32) string {
	if name == "" {
		return PCIID(vendor, device)
	}
	return fmt.Sprintf("%s (%s)", name, PCIID(vendor, device))
}

// Sizes as people read them: drives in decimal units (how they are sold),
// DIMMs in binary ones (how they are built).
func decimal(n uint64) string {
	for _, u := range []struct {
		unit string
		div  float64
	}{{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}} {
		if float64(n) >= u.div {
			return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", float64(n)/u.div), "0"), ".") + " " + u.unit
		}
	}
	return fmt.Sprintf("%d B", n)
}

func binary(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d B", n)
}

// Compare returns the verdicts of inv against h, in a stable order: cpu,
// memory, gpus, nvswitches, nics, nvme. A nil h yields none.
func Compare(inv *curev1.Inventory, h *manifests.Hardware) []checks.Verdict {
	if h == nil {
		return nil
	}
	if inv == nil {
		inv = &curev1.Inventory{}
	}
	var p planner
	if h.CPU != nil {
		p.cpu(inv, h.CPU)
	}
	if h.Memory != nil {
		p.memory(inv, h.Memory)
	}
	if h.GPUs != nil {
		p.gpus(inv, h.GPUs)
	}
	if h.NVSwitches != nil {
		p.count("nvswitch", "NVSwitches", len(inv.GetNvswitches()), h.NVSwitches.Count)
		if h.NVSwitches.PCIe != nil {
			var devs []linked
			for i, sw := range inv.GetNvswitches() {
				devs = append(devs, linked{fmt.Sprintf("nvswitch/%d", i), sw.GetAddress()})
			}
			if p.links(inv, h.NVSwitches.PCIe, devs) == 0 {
				p.pass("nvswitch", fmt.Sprintf("%d links", len(devs)), expectPCIe(h.NVSwitches.PCIe), "every NVSwitch link at %s or better", expectPCIe(h.NVSwitches.PCIe))
			}
		}
	}
	if len(h.NICs) > 0 {
		p.nics(inv, h.NICs)
	}
	if len(h.NVMe) > 0 {
		p.nvme(inv, h.NVMe)
	}
	return p.out
}

// Failures are the verdicts that are not PASS.
func Failures(vs []checks.Verdict) []checks.Verdict {
	var out []checks.Verdict
	for _, v := range vs {
		if v.Status != checks.Pass {
			out = append(out, v)
		}
	}
	return out
}

type planner struct{ out []checks.Verdict }

func (p *planner) add(status checks.Status, component, observed, expected, format string, args ...any) {
	p.out = append(p.out, checks.Verdict{Component: component, Check: Check, Status: status,
		Observed: observed, Expected: expected, Message: fmt.Sprintf(format, args...)})
}

func (p *planner) fail(component, observed, expected, format string, args ...any) {
	p.add(checks.Fail, component, observed, expected, format, args...)
}

func (p *planner) pass(component, observed, expected, format string, args ...any) {
	p.add(checks.Pass, component, observed, expected, format, args...)
}

// count checks a plain device count.
func (p *planner) count(component, what string, have, want int) {
	o, e := fmt.Sprint(have), fmt.Sprint(want)
	if have != want {
		p.fail(component, o, e, "count %d, want %d", have, want)
		return
	}
	p.pass(component, o, e, "%d %s", have, what)
}

// glob matches a manifest glob; the loader has validated it.
func glob(pattern, s string) bool {
	ok, err := path.Match(pattern, s)
	return err == nil && ok
}

func (p *planner) cpu(inv *curev1.Inventory, c *manifests.CPUSpec) {
	procs := inv.GetProcessors()
	bad := 0
	if c.Sockets > 0 && len(procs) != c.Sockets {
		p.fail("cpu", fmt.Sprint(len(procs)), fmt.Sprint(c.Sockets), "%d sockets, want %d", len(procs), c.Sockets)
		bad++
	}
	var cores uint32
	for _, pr := range procs {
		cores += pr.GetCores()
		if c.Model != "" && !glob(c.Model, pr.GetModel()) {
			p.fail(fmt.Sprintf("cpu/%d", pr.GetId()), pr.GetModel(), c.Model, "model %q, want %q", pr.GetModel(), c.Model)
			bad++
		}
	}
	if c.Cores > 0 && int(cores) != c.Cores {
		p.fail("cpu", fmt.Sprintf("%d cores", cores), fmt.Sprintf("%d cores", c.Cores), "%d cores, want %d", cores, c.Cores)
		bad++
	}
	if bad == 0 {
		model := ""
		if len(procs) > 0 {
			model = procs[0].GetModel()
		}
		p.pass("cpu", fmt.Sprintf("%d x %s, %d cores", len(procs), model, cores), expectCPU(c), "as declared")
	}
}

func expectCPU(c *manifests.CPUSpec) string {
	var parts []string
	if c.Sockets > 0 {
		parts = append(parts, fmt.Sprintf("%d sockets", c.Sockets))
	}
	if c.Model != "" {
		parts = append(parts, c.Model)
	}
	if c.Cores > 0 {
		parts = append(parts, fmt.Sprintf("%d cores", c.Cores))
	}
	return strings.Join(parts, ", ")
}

func dimmComponent(d *curev1.Dimm, i int) string {
	if d.GetLocator() != "" {
		return "dimm/" + d.GetLocator()
	}
	return fmt.Sprintf("dimm/%d", i)
}

func (p *planner) memory(inv *curev1.Inventory, m *manifests.MemorySpec) {
	dimms := inv.GetDimms()
	bad := 0
	var populated []int // indexes into dimms
	var empty []int
	byLoc := map[string]int{}
	for i, d := range dimms {
		if d.GetLocator() != "" {
			byLoc[d.GetLocator()] = i
		}
		if d.GetSizeBytes() > 0 {
			populated = append(populated, i)
		} else {
			empty = append(empty, i)
		}
	}
	named := map[int]bool{} // slots already reported absent
	for _, loc := range m.Locators {
		i, ok := byLoc[loc]
		switch {
		case !ok:
			p.fail("dimm/"+loc, "no such slot", "populated", "absent: SMBIOS lists no slot %q", loc)
			bad++
		case dimms[i].GetSizeBytes() == 0:
			p.fail("dimm/"+loc, "empty", "populated", "absent")
			named[i] = true
			bad++
		}
	}
	if m.DIMMs > 0 && len(populated) != m.DIMMs {
		missing := m.DIMMs - len(populated)
		// Fewer than declared: the empty slots are the suspects, each named,
		// unless the SKU named its slots (reported above) or every slot is
		// accounted for already.
		if missing > 0 && len(m.Locators) == 0 && len(empty) > 0 {
			for _, i := range empty {
				p.fail(dimmComponent(dimms[i], i), "empty", "populated", "absent")
			}
		}
		p.fail("memory", fmt.Sprintf("%d DIMMs", len(populated)), fmt.Sprintf("%d DIMMs", m.DIMMs),
			"%d DIMMs populated, want %d (%d slots listed by SMBIOS)", len(populated), m.DIMMs, len(dimms))
		bad++
	}
	if m.DIMMSize > 0 {
		for _, i := range populated {
			d := dimms[i]
			if d.GetSizeBytes() != uint64(m.DIMMSize) {
				have, want := binary(d.GetSizeBytes()), binary(uint64(m.DIMMSize))
				p.fail(dimmComponent(d, i), have, want, "size %s, want %s", have, want)
				bad++
			}
		}
	}
	if bad == 0 {
		size := ""
		if m.DIMMSize > 0 {
			size = " of " + binary(uint64(m.DIMMSize))
		}
		p.pass("memory", fmt.Sprintf("%d DIMMs%s", len(populated), size), fmt.Sprintf("%d DIMMs%s", m.DIMMs, size), "every declared DIMM present")
	}
}

const nvidia = 0x10de

func (p *planner) gpus(inv *curev1.Inventory, g *manifests.GPUSpec) {
	gpus := inv.GetGpus()
	bad := 0
	if len(g.Addresses) > 0 {
		byAddr := map[string]*curev1.Gpu{}
		for _, x := range gpus {
			byAddr[strings.ToLower(x.GetPciAddress())] = x
		}
		want := map[string]bool{}
		for i, a := range g.Addresses {
			want[a] = true
			if byAddr[a] == nil {
				p.fail(fmt.Sprintf("gpu/%d", i), "absent", a, "missing at PCI %s", a)
				bad++
			}
		}
		for _, x := range gpus {
			if a := strings.ToLower(x.GetPciAddress()); !want[a] {
				p.fail("gpu/"+a, a, "one of the declared addresses", "unexpected GPU at PCI %s: %s", a, describe(x.GetName(), nvidia, x.GetPciDeviceId()))
				bad++
			}
		}
	}
	if g.Count > 0 && len(gpus) != g.Count {
		p.fail("gpus", fmt.Sprint(len(gpus)), fmt.Sprint(g.Count), "count %d, want %d", len(gpus), g.Count)
		bad++
	}
	if g.Model != "" || g.PCIID != "" {
		want := strings.TrimSpace(g.Model + " " + g.PCIID)
		for i, x := range gpus {
			if !pciMatch(g.Model, g.PCIID, x.GetName(), nvidia, x.GetPciDeviceId()) {
				have := describe(x.GetName(), nvidia, x.GetPciDeviceId())
				p.fail(gpuComponent(g, x, i), have, want, "%s at PCI %s, want %s", have, x.GetPciAddress(), want)
				bad++
			}
		}
	}
	if g.PCIe != nil {
		var devs []linked
		for i, x := range gpus {
			devs = append(devs, linked{gpuComponent(g, x, i), x.GetPciAddress()})
		}
		bad += p.links(inv, g.PCIe, devs)
	}
	if bad == 0 {
		msg := "every declared GPU present"
		if g.PCIe != nil {
			msg += ", links at " + expectPCIe(g.PCIe) + " or better"
		}
		p.pass("gpus", fmt.Sprintf("%d GPUs", len(gpus)), strings.TrimSpace(fmt.Sprintf("%d GPUs %s %s", g.Count, g.Model, g.PCIID)), "%s", msg)
	}
}

// gpuComponent names a present GPU by its declared index when addresses
// are declared, by its inventory index otherwise.
func gpuComponent(g *manifests.GPUSpec, x *curev1.Gpu, i int) string {
	for j, a := range g.Addresses {
		if strings.EqualFold(a, x.GetPciAddress()) {
			return fmt.Sprintf("gpu/%d", j)
		}
	}
	return fmt.Sprintf("gpu/%d", i)
}

// physicalNICs are the inventory's NICs in PCI address order: nic/N is the
// Nth port on the bus, the order a technician counts them in.
func physicalNICs(inv *curev1.Inventory) []*curev1.NetInterface {
	var out []*curev1.NetInterface
	for _, n := range inv.GetNics() {
		if n.GetPciAddress() != "" {
			out = append(out, n)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].GetPciAddress() < out[j].GetPciAddress() })
	return out
}

func (p *planner) nics(inv *curev1.Inventory, groups []manifests.NICSpec) {
	nics := physicalNICs(inv)
	for _, g := range groups {
		bad := 0
		var ports []int
		for i, n := range nics {
			if pciMatch(g.Model, g.PCIID, n.GetModel(), n.GetPciVendorId(), n.GetPciDeviceId()) {
				ports = append(ports, i)
			}
		}
		if g.Count > 0 && len(ports) != g.Count {
			p.fail("nic", fmt.Sprintf("%d ports", len(ports)), fmt.Sprintf("%d ports", g.Count),
				"%d ports match %s, want %d", len(ports), nicGroup(g), g.Count)
			bad++
		}
		if g.SpeedMbps > 0 {
			want := fmt.Sprintf("%d Mb/s", g.SpeedMbps)
			for _, i := range ports {
				n := nics[i]
				comp := fmt.Sprintf("nic/%d", i)
				switch s := n.GetSpeedMbps(); {
				case s == 0:
					p.fail(comp, "link down", want, "link down on %s (PCI %s), want %d Mb/s", n.GetName(), n.GetPciAddress(), g.SpeedMbps)
					bad++
				case int(s) != g.SpeedMbps:
					p.fail(comp, fmt.Sprintf("%d Mb/s", s), want, "link %d Mb/s, want %d on %s (PCI %s)", s, g.SpeedMbps, n.GetName(), n.GetPciAddress())
					bad++
				}
			}
		}
		if g.PCIe != nil {
			var devs []linked
			for _, i := range ports {
				devs = append(devs, linked{fmt.Sprintf("nic/%d", i), nics[i].GetPciAddress()})
			}
			bad += p.links(inv, g.PCIe, devs)
		}
		if bad == 0 {
			p.pass("nic", fmt.Sprintf("%d ports", len(ports)), expectNIC(g), "%s as declared", nicGroup(g))
		}
	}
}

// nicGroup names a NIC group in messages: its model glob and/or PCI id.
func nicGroup(g manifests.NICSpec) string {
	switch {
	case g.Model == "":
		return g.PCIID
	case g.PCIID == "":
		return fmt.Sprintf("%q", g.Model)
	}
	return fmt.Sprintf("%q %s", g.Model, g.PCIID)
}

func expectNIC(g manifests.NICSpec) string {
	s := nicGroup(g)
	if g.Count > 0 {
		s = fmt.Sprintf("%d x %s", g.Count, s)
	}
	if g.SpeedMbps > 0 {
		s += fmt.Sprintf(" at %d Mb/s", g.SpeedMbps)
	}
	if g.PCIe != nil {
		s += ", PCIe " + expectPCIe(g.PCIe)
	}
	return s
}

func (p *planner) nvme(inv *curev1.Inventory, groups []manifests.NVMeSpec) {
	sizes := map[string]uint64{}
	for _, d := range inv.GetDisks() {
		sizes[d.GetName()] = d.GetSizeBytes()
	}
	for _, g := range groups {
		bad := 0
		var ctrls []int
		for i, c := range inv.GetNvme() {
			if glob(g.Model, c.GetModel()) {
				ctrls = append(ctrls, i)
			}
		}
		if g.Count > 0 && len(ctrls) != g.Count {
			p.fail("nvme", fmt.Sprintf("%d drives", len(ctrls)), fmt.Sprintf("%d drives", g.Count),
				"%d drives match %q, want %d", len(ctrls), g.Model, g.Count)
			bad++
		}
		if g.MinSize > 0 {
			for _, i := range ctrls {
				c := inv.GetNvme()[i]
				var size uint64
				for _, ns := range c.GetNamespaces() {
					size += sizes[ns]
				}
				if size < uint64(g.MinSize) {
					have, want := decimal(size), decimal(uint64(g.MinSize))
					p.fail(fmt.Sprintf("nvme/%d", i), have, "at least "+want,
						"size %s, want at least %s (%s, serial %s)", have, want, c.GetName(), c.GetSerial())
					bad++
				}
			}
		}
		if g.PCIe != nil {
			var devs []linked
			for _, i := range ctrls {
				devs = append(devs, linked{fmt.Sprintf("nvme/%d", i), inv.GetNvme()[i].GetPciAddress()})
			}
			bad += p.links(inv, g.PCIe, devs)
		}
		if bad == 0 {
			want := g.Model
			if g.PCIe != nil {
				want += ", PCIe " + expectPCIe(g.PCIe)
			}
			p.pass("nvme", fmt.Sprintf("%d drives", len(ctrls)), want, "%q as declared", g.Model)
		}
	}
}

// linked is a device of a group with a declared PCIe link.
type linked struct {
	component, address string
}

// links judges each device's negotiated link against the group's
// declaration; it returns how many fell short (or could not be read).
// The message carries the capable link and the port's, so the reader can
// tell a device that trained low (capable of more) from a slot that
// offers less (the port capable of less: a BIOS bifurcation setting, a riser).
func (p *planner) links(inv *curev1.Inventory, want *manifests.PCIeSpec, devs []linked) int {
	byAddr := map[string]*curev1.PcieLink{}
	for _, l := range inv.GetPcieLinks() {
		byAddr[strings.ToLower(l.GetAddress())] = l
	}
	exp := expectPCIe(want)
	bad := 0
	for _, d := range devs {
		l := byAddr[strings.ToLower(d.address)]
		if l == nil || (l.GetMaxSpeedGts() == 0 && l.GetMaxWidth() == 0) {
			p.add(checks.Error, d.component, "unknown", exp, "%s has no PCIe link in sysfs; SKU wants %s", orUnknown(d.address), exp)
			bad++
			continue
		}
		slow := want.Gen > 0 && l.GetSpeedGts() < pci.GenSpeed(want.Gen)
		narrow := want.Width > 0 && int(l.GetWidth()) < want.Width
		if !slow && !narrow {
			continue
		}
		bad++
		have := pci.Speed(l.GetSpeedGts()) + " " + pci.Width(int(l.GetWidth()))
		msg := fmt.Sprintf("%s link %s, capable %s %s", d.address, have, pci.Speed(l.GetMaxSpeedGts()), pci.Width(int(l.GetMaxWidth())))
		if l.GetPort() != "" && (l.GetPortMaxSpeedGts() > 0 || l.GetPortMaxWidth() > 0) {
			msg += fmt.Sprintf(", port %s capable %s %s", l.GetPort(), pci.Speed(l.GetPortMaxSpeedGts()), pci.Width(int(l.GetPortMaxWidth())))
		}
		p.fail(d.component, have, exp, "%s; SKU wants %s", msg, exp)
	}
	return bad
}

// expectPCIe is a declaration as a reader says it: "gen4 x4", "gen5", "x16".
func expectPCIe(s *manifests.PCIeSpec) string {
	var parts []string
	if s.Gen > 0 {
		parts = append(parts, fmt.Sprintf("gen%d", s.Gen))
	}
	if s.Width > 0 {
		parts = append(parts, fmt.Sprintf("x%d", s.Width))
	}
	return strings.Join(parts, " ")
}

func orUnknown(addr string) string {
	if addr == "" {
		return "the device (no PCI address)"
	}
	return addr
}
