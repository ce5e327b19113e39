// Package rmaparts lists the parts a run's FAIL, ERROR and MARGINAL
// verdicts name, each with what identifies it for a replacement (serial,
// slot, PCI address, firmware, PCIe link) from the run's inventory and the
// identity blocks of the verdicts, and the evidence the runner attached:
// the first page of an RMA ticket. Pure: a report's inventory and
// verdicts in, parts out, in component order.
package rmaparts

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/natural"
)

// MaxLines bounds the kernel log and evidence lines one part carries.
const MaxLines = 40

// Parts builds the part list.
func Parts(inv *curev1.Inventory, vs []*curev1.Verdict) []*curev1.RmaPart {
	if inv == nil {
		inv = &curev1.Inventory{}
	}
	byComp := map[string]*curev1.RmaPart{}
	for _, v := range vs {
		if !bad(v.GetStatus()) {
			continue
		}
		p := byComp[v.GetComponent()]
		if p == nil {
			p = &curev1.RmaPart{Component: v.GetComponent(), Status: v.GetStatus()}
			identify(p, inv)
			byComp[v.GetComponent()] = p
		}
		if rank(v.GetStatus()) > rank(p.Status) {
			p.Status = v.GetStatus()
		}
		if !contains(p.Checks, v.GetCheck()) {
			p.Checks = append(p.Checks, v.GetCheck())
		}
		_, blocks := curev1.SplitEvidence(v.GetMessage())
		for _, b := range blocks {
			switch {
			case b.Title == curev1.EvidenceIdentity:
				fromIdentity(p, b.Identity())
			case b.IsKernelLog():
				p.KernelLog = appendBounded(p.KernelLog, b.Lines)
			default:
				p.Evidence = appendBounded(p.Evidence, append([]string{b.Title + ":"}, b.Lines...))
			}
		}
	}
	out := make([]*curev1.RmaPart, 0, len(byComp))
	for _, p := range byComp {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return natural.Compare(out[i].Component, out[j].Component) < 0 })
	return out
}

func bad(s curev1.VerdictStatus) bool {
	return s == curev1.VerdictStatus_FAIL || s == curev1.VerdictStatus_ERROR || s == curev1.VerdictStatus_MARGINAL
}

// rank: a definite FAIL outranks an ERROR, which outranks MARGINAL.
func rank(s curev1.VerdictStatus) int {
	switch s {
	case curev1.VerdictStatus_FAIL:
		return 3
	case curev1.VerdictStatus_ERROR:
		return 2
	case curev1.VerdictStatus_MARGINAL:
		return 1
	case curev1.VerdictStatus_PASS, curev1.VerdictStatus_MATCH, curev1.VerdictStatus_DRIFT, curev1.VerdictStatus_SKIP,
		curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED:
		return 0 // names no part to replace
	default:
		return 0
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func appendBounded(list, more []string) []string {
	for _, l := range more {
		if len(list) == MaxLines {
			break
		}
		if !contains(list, l) {
			list = append(list, l)
		}
	}
	return list
}

// identify fills what the inventory knows of the component's part. The
// component names follow the runner's checks: nvme/<index>, disk/<name>,
// dimm/<locator>, gpu/<index or PCI address>, nvswitch/<index>,
// nic/<index on the bus or name>, ib/<device>/<port>, cpu/<socket>.
func identify(p *curev1.RmaPart, inv *curev1.Inventory) {
	kind, rest, _ := strings.Cut(p.Component, "/")
	p.Kind = kind
	idx, idxErr := strconv.Atoi(rest)
	index := func(n int) (int, bool) { return idx, idxErr == nil && idx >= 0 && idx < n }
	switch kind {
	case "nvme":
		if i, ok := index(len(inv.GetNvme())); ok {
			nvme(p, inv, inv.GetNvme()[i])
		}
	case "disk":
		p.Location = rest
		for _, c := range inv.GetNvme() {
			for _, ns := range c.GetNamespaces() {
				if ns == rest {
					nvme(p, inv, c)
					p.Location = rest + " on " + p.Location
				}
			}
		}
		for _, d := range inv.GetDisks() {
			if d.GetName() == rest {
				p.Model, p.Serial = first(p.Model, d.GetModel()), first(p.Serial, d.GetSerial())
			}
		}
	case "dimm":
		p.Location = "slot " + rest
		for _, d := range inv.GetDimms() {
			if d.GetLocator() != rest {
				continue
			}
			p.Serial, p.PartNumber = d.GetSerial(), d.GetPartNumber()
			p.Model = strings.TrimSpace(fmt.Sprintf("%s %s %s", d.GetManufacturer(), d.GetType(), size(d.GetSizeBytes())))
			if d.GetBank() != "" {
				p.Location += " (bank " + d.GetBank() + ")"
			}
		}
	case "gpu":
		var g *curev1.Gpu
		if i, ok := index(len(inv.GetGpus())); ok {
			g = inv.GetGpus()[i]
		}
		for _, x := range inv.GetGpus() {
			if strings.EqualFold(x.GetPciAddress(), rest) {
				g = x
			}
		}
		if g != nil {
			p.Model, p.Serial, p.Uuid, p.Firmware, p.PartNumber = g.GetName(), g.GetSerial(), g.GetUuid(), g.GetVbios(), g.GetBoardPartNumber()
			pci(p, inv, g.GetPciAddress())
		}
	case "nvswitch":
		if i, ok := index(len(inv.GetNvswitches())); ok {
			sw := inv.GetNvswitches()[i]
			p.Model = sw.GetName()
			pci(p, inv, sw.GetAddress())
		}
	case "nic":
		for i, n := range physicalNICs(inv) {
			if n.GetName() == rest || (idxErr == nil && i == idx) {
				p.Model = strings.TrimSpace(n.GetModel() + " " + n.GetName())
				p.Serial = n.GetMac()
				pci(p, inv, n.GetPciAddress())
			}
		}
	case "ib":
		p.Location = rest
	case "cpu":
		for _, pr := range inv.GetProcessors() {
			if idxErr == nil && int(pr.GetId()) == idx {
				p.Model = pr.GetModel()
			}
		}
		p.Location = "socket " + rest
	}
}

func nvme(p *curev1.RmaPart, inv *curev1.Inventory, c *curev1.NvmeController) {
	p.Model, p.Serial, p.Firmware = c.GetModel(), c.GetSerial(), c.GetFirmware()
	pci(p, inv, c.GetPciAddress())
	if p.Location == "" {
		p.Location = c.GetName()
	} else {
		p.Location = c.GetName() + " at " + p.Location
	}
}

// pci sets the location to the PCI address and the link from the
// inventory's PCIe links.
func pci(p *curev1.RmaPart, inv *curev1.Inventory, addr string) {
	if addr == "" {
		return
	}
	p.Location = "PCI " + addr
	for _, l := range inv.GetPcieLinks() {
		if strings.EqualFold(l.GetAddress(), addr) {
			p.Link = Link(l)
		}
	}
}

// Link formats a link as "2.5 GT/s x1 of 16 GT/s x4 (port 0000:00:01.0: 2.5 GT/s x1)".
func Link(l *curev1.PcieLink) string {
	s := fmt.Sprintf("%s x%d of %s x%d", gts(l.GetSpeedGts()), l.GetWidth(), gts(l.GetMaxSpeedGts()), l.GetMaxWidth())
	if l.GetPort() != "" && (l.GetPortMaxSpeedGts() > 0 || l.GetPortMaxWidth() > 0) {
		s += fmt.Sprintf(" (port %s: %s x%d)", l.GetPort(), gts(l.GetPortMaxSpeedGts()), l.GetPortMaxWidth())
	}
	return s
}

func gts(v float64) string {
	if v <= 0 {
		return "down"
	}
	return strconv.FormatFloat(v, 'f', -1, 64) + " GT/s"
}

func size(b uint64) string {
	if b == 0 {
		return ""
	}
	if b%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", b>>30)
	}
	return fmt.Sprintf("%d MiB", b>>20)
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// fromIdentity takes what a verdict's identity block says (the runner's
// reading of the part at check time: a GPU's NVML serial) over nothing.
func fromIdentity(p *curev1.RmaPart, id map[string]string) {
	set := func(dst *string, keys ...string) {
		for _, k := range keys {
			if v := id[k]; v != "" && *dst == "" {
				*dst = v
			}
		}
	}
	set(&p.Serial, "serial")
	set(&p.Uuid, "uuid")
	set(&p.Firmware, "vbios", "firmware")
	set(&p.PartNumber, "board part number", "part")
	set(&p.Model, "model", "name")
	if p.Location == "" {
		set(&p.Location, "slot", "pci")
	}
}

// physicalNICs orders NICs as the hardware check numbers them (nic/N).
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

// GPUIdentities fills the inventory's GPU entries with the NVML identity
// the runner's GPU check put in its verdicts (identity blocks naming the
// GPU's PCI address): the inventory a runner reports at boot is read
// before the GPU driver loads, from the PCI bus alone. inv is changed in
// place (the report's copy).
func GPUIdentities(inv *curev1.Inventory, vs []*curev1.Verdict) {
	if inv == nil {
		return
	}
	for _, v := range vs {
		if !strings.HasPrefix(v.GetComponent(), "gpu/") {
			continue
		}
		_, blocks := curev1.SplitEvidence(v.GetMessage())
		for _, b := range blocks {
			if b.Title != curev1.EvidenceIdentity {
				continue
			}
			id := b.Identity()
			for _, g := range inv.GetGpus() {
				if id["pci"] == "" || !strings.EqualFold(g.GetPciAddress(), id["pci"]) {
					continue
				}
				g.Uuid, g.Serial, g.Vbios, g.BoardPartNumber = first(id["uuid"], g.Uuid), first(id["serial"], g.Serial),
					first(id["vbios"], g.Vbios), first(id["board part number"], g.BoardPartNumber)
				g.IdentitySource = "nvml"
				if t, err := strconv.Atoi(strings.TrimSuffix(id["memory temp peak"], " C")); err == nil && t > 0 {
					g.MemoryTempC = int32(t)
				}
			}
		}
	}
}
