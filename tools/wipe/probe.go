package wipe

import (
	"fmt"

	"github.com/cure-oss/cure/tools/ata"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/nvme"
	"github.com/cure-oss/cure/tools/opal"
)

// Probe reads what the planner needs from the drive: Identify
// Controller/Namespace for NVMe (filling h.Namespace and n's capability
// fields), IDENTIFY DEVICE for SATA (when h.ATA is set) and Level 0
// Discovery. n is nil for non-NVMe disks. Discovery and IDENTIFY failures
// are recorded in Target.OpalErr / Target.ATAErr for the planner to judge.
func Probe(disk blockdev.Disk, h *Handles, n *NVMeInfo, batch []string) (Target, error) {
	t := Target{Disk: disk, Batch: batch}
	if n != nil {
		if h.Admin == nil {
			return t, fmt.Errorf("probe %s: NVMe disk without a controller handle", disk.Name)
		}
		c, err := nvme.IdentifyController(h.Admin)
		if err != nil {
			return t, fmt.Errorf("probe %s: %w", disk.Name, err)
		}
		ns, err := nvme.IdentifyNamespace(h.Admin, n.NSID)
		if err != nil {
			return t, fmt.Errorf("probe %s: %w", disk.Name, err)
		}
		h.Namespace = ns
		info := *n
		info.OACS, info.SANICAP, info.FNA = c.OACS, c.SANICAP, c.FNA
		t.NVMe = &info
	}
	if h.ATA != nil {
		t.ATA, t.ATAErr = ata.IdentifyDevice(h.ATA)
		if t.ATAErr != nil {
			t.ATAErr = fmt.Errorf("probe %s: %w", disk.Name, t.ATAErr)
		}
	}
	if h.Security == nil {
		t.OpalErr = fmt.Errorf("%w: transport %s has no security protocol path", opal.ErrNoTCG, disk.Transport)
		return t, nil
	}
	// Always ask, even when OACS claims no security commands: the answer
	// (including the controller's own rejection status) is the evidence.
	t.Opal, t.OpalErr = opal.Discover(h.Security)
	return t, nil
}
