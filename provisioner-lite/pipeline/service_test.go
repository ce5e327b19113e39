package pipeline_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
)

// TestServiceModeFakeNode: service on a node with no installed OS on
// record stops at preflight, untouched. On a provisioned node it flashes
// the drifted BMC, BIOS and HGX firmware and applies the BIOS setting, as
// provision would; the runner is given the in-band firmware phases and
// nothing that writes a disk (no sed_revert, no os_install, no PSIDs, no
// first-boot seed); and the node goes back to its OS, whose callback with
// its provision's token ends the run.
func TestServiceModeFakeNode(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	runID, err := f.eng.Start(ctx, "node1", modes.Service, "", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_FAILED || !strings.Contains(r.Message, "no installed OS on record") || r.Reboots != 0 || len(f.m.Boots()) != 0 {
		t.Fatalf("service of a node never provisioned: %s %q, %d reboots, boots %v", r.Status, r.Message, r.Reboots, f.m.Boots())
	}

	prov, err := f.eng.Start(ctx, "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.waitRun(prov); r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("provision ended %s: %s", r.Status, r.Message)
	}
	// The site pins new firmware and a BIOS setting after the node was
	// deployed.
	sku, err := manifests.LoadSKU(filepath.Join(f.dir, "manifests", "qemu-nvme.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	allDrift(t)(sku, filepath.Join(f.dir, "artifacts", "sha256"))
	raw, err := manifests.Marshal(sku)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "manifests", "qemu-nvme.yaml"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	provAssignments := len(f.assignments)
	f.mu.Unlock()

	runID, err = f.eng.Start(ctx, "node1", modes.Service, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.waitRun(runID); r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("service ended %s: %s", r.Status, r.Message)
	}
	if v, _, _ := f.bmc.FirmwareVersion("BIOS"); v != "2.21.2" {
		t.Errorf("BIOS runs %q", v)
	}
	if v, _, _ := f.bmc.FirmwareVersion("BMC"); v != "1.50.0" {
		t.Errorf("BMC runs %q", v)
	}
	if got := f.bmc.BiosAttributes()["ProcTurboMode"]; got != "Disabled" {
		t.Errorf("ProcTurboMode = %v after service", got)
	}
	f.mu.Lock()
	served := f.assignments[provAssignments:]
	f.mu.Unlock()
	if len(served) == 0 {
		t.Fatal("service assigned the runner nothing")
	}
	for _, a := range served {
		if a.GetMode() != curev1.Mode_MODE_SERVICE || a.GetFirstBoot() != nil || len(a.GetPsids()) != 0 ||
			slices.Contains(a.GetPhases(), string(modes.SEDRevert)) || slices.Contains(a.GetPhases(), string(modes.OSInstall)) {
			t.Errorf("service assignment: mode %v phases %v first boot %v psids %d", a.GetMode(), a.GetPhases(), a.GetFirstBoot(), len(a.GetPsids()))
		}
	}
	ps := f.phases(runID)
	for _, p := range []modes.PhaseName{modes.BMC, modes.BIOS, modes.BIOSSettings, modes.HGX, modes.NVMe} {
		if ps[p].Status != curev1.PhaseStatus_PHASE_OK {
			t.Errorf("%s = %s: %s", p, ps[p].Status, ps[p].Message)
		}
	}
	if w := ps[modes.WaitForHostOS]; w.Status != curev1.PhaseStatus_PHASE_OK || !strings.Contains(w.Message, "host OS called back") {
		t.Errorf("wait_for_host_os = %+v", w)
	}
	if _, ran := ps[modes.OSInstall]; ran {
		t.Error("service ran os_install")
	}
	if os, err := f.st.InstalledOS(ctx, "node1"); err != nil || os.RunID != prov {
		t.Errorf("installed OS after service: %+v, %v; want the provision's, unchanged", os, err)
	}
}
