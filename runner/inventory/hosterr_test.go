package inventory

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cure-oss/cure/runner/inventory/invtest"
)

// TestHostErrors: the boot's machine checks (the recorded QEMU guest's
// corrected memory error) placed on the fixture's one DIMM, and EDAC
// counters on the slot their label names.
func TestHostErrors(t *testing.T) {
	r := fixtureRoot(t)
	invtest.CopyFile(t, "../../tools/kmsg/testdata/qemu-tcg-mce.kmsg", filepath.Join(r, "dev/kmsg"))
	mc := "sys/devices/system/edac/mc/mc0/dimm0/"
	invtest.Write(t, r, mc+"dimm_label", "BANK DIMM 0\n")
	invtest.Write(t, r, mc+"dimm_ce_count", "3\n")
	invtest.Write(t, r, mc+"dimm_ue_count", "0\n")
	inv, _, err := Collect(context.Background(), Options{Root: r, Log: quiet(), NoIdentify: true, Links: func() ([]Link, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.MachineChecks) != 1 {
		t.Fatalf("machine checks %v", inv.MachineChecks)
	}
	m := inv.MachineChecks[0]
	if m.Cpu != 0 || m.Bank != 9 || m.Status != 0x9c0000000000009f || m.Address != 0x1000 || m.Uncorrected || !m.Memory || m.Dimm != "DIMM 0" || m.UptimeS < 5.77 || m.UptimeS > 5.78 {
		t.Errorf("machine check %v", m)
	}
	if d := inv.Dimms[0]; d.EdacCeCount != 3 || d.EdacUeCount != 0 || d.EdacLabel != "BANK DIMM 0" {
		t.Errorf("dimm %v", d)
	}
	// No kernel log in the root: nothing listed, no failure.
	os.Remove(filepath.Join(r, "dev/kmsg"))
	inv, _, err = Collect(context.Background(), Options{Root: r, Log: quiet(), NoIdentify: true, Links: func() ([]Link, error) { return nil, nil }})
	if err != nil || len(inv.MachineChecks) != 0 {
		t.Errorf("no kernel log: %v %v", inv.MachineChecks, err)
	}
}
