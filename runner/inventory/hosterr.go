package inventory

import (
	"errors"
	"io/fs"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/edac"
	"github.com/cure-oss/cure/tools/kmsg"
	"github.com/cure-oss/cure/tools/mce"
	"github.com/cure-oss/cure/tools/memmap"
)

// maxMachineChecks bounds the records an inventory carries; a storm is
// summarised by the hardware_errors verdict, not listed here.
const maxMachineChecks = 64

// edacOnDIMMs ties EDAC's per-DIMM counters to the SMBIOS slots their
// labels name. Counters of labels no slot matches stay out of the
// inventory (the hardware_errors verdict names them by label).
func edacOnDIMMs(dimms []*curev1.Dimm, s edac.Summary) {
	var locs []string
	for _, d := range dimms {
		locs = append(locs, d.GetLocator())
	}
	for _, e := range s.DIMMs {
		loc := edac.MatchLocator(e.Label, locs)
		if loc == "" {
			continue
		}
		for _, d := range dimms {
			if d.GetLocator() == loc {
				d.EdacCeCount += e.CE
				d.EdacUeCount += e.UE
				d.EdacLabel = e.Label
			}
		}
	}
}

// machineChecks lists the machine checks the kernel logged so far in this
// boot (errors a previous boot left in the banks are logged at boot), a
// memory error placed on its DIMM slot where the SMBIOS map says which.
func machineChecks(recs []kmsg.Record, m *memmap.Map) []*curev1.MachineCheck {
	var out []*curev1.MachineCheck
	for _, r := range mce.Parse(recs) {
		if len(out) == maxMachineChecks {
			break
		}
		mc := &curev1.MachineCheck{Cpu: uint32(r.CPU), Bank: uint32(r.Bank), Status: r.Status, Socket: uint32(r.Socket),
			Uncorrected: r.Uncorrected(), Memory: r.Memory(), UptimeS: r.Uptime.Seconds()}
		if r.HasAddr() {
			mc.Address = r.Addr
			if ds, _ := m.Lookup(r.Addr); r.Memory() && len(ds) == 1 {
				mc.Dimm = ds[0].Locator
			}
		}
		out = append(out, mc)
	}
	return out
}

// hostErrors fills the DIMMs' EDAC counters and the boot's machine checks.
func hostErrors(o *Options, inv *curev1.Inventory, warn func(string, error)) {
	if s, err := edac.Read(o.Root); err == nil {
		edacOnDIMMs(inv.Dimms, s)
	} else if !errors.Is(err, edac.ErrNoEDAC) {
		warn("edac counters", err)
	}
	path := o.KernelLog
	if path == "" {
		path = o.path("dev/kmsg")
	}
	recs, err := kmsg.Read(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			warn("kernel log", err)
		}
		return
	}
	m, err := memmap.Read(o.Root)
	if err != nil {
		m = nil // machine checks are listed without their slot
	}
	inv.MachineChecks = machineChecks(recs, m)
}
