package qemutest

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/render"
	"github.com/cure-oss/cure/qemu-test/harness"
	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// part finds a report's RMA part by component.
func part(rep *curev1.RunReport, component string) *curev1.RmaPart {
	for _, p := range rep.GetParts() {
		if p.GetComponent() == component {
			return p
		}
	}
	return nil
}

// htmlReport renders the run's HTML report as curectl report --html does.
func htmlReport(t *testing.T, env *harness.Env, rep *curev1.RunReport) string {
	t.Helper()
	var b bytes.Buffer
	if err := render.WriteHTML(&b, rep, nil); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestPCIeLinkDegraded: the node's NVMe controller sits behind a PCIe root
// port limited to 2.5 GT/s x1 (QEMU x-speed/x-width) while the SKU declares
// its drives gen4 x4. The runner reads the link from the guest's sysfs, the
// hardware gate names the drive with its negotiated link, its capability
// and the port's, and the report lists the part with its serial, link and
// the kernel's lines about it; nothing is written.
//
// QEMU 7.2's emulated endpoints always report a 2.5 GT/s x1 link of their
// own (Link Capabilities and Status alike), so the narrowed setting shows
// in the port's capability, which the verdict carries.
func TestPCIeLinkDegraded(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	env := startEnv(t, harness.Options{PhaseAttempts: 1, DiskPort: &vbmc.RootPort{Speed: "2_5", Width: 1},
		EditManifest: func(sku *manifests.SKU) { sku.Spec.Hardware.NVMe[0].PCIe = &manifests.PCIeSpec{Gen: 4, Width: 4} }})
	n := env.Nodes[0]
	rep := provisionAndWait(t, env, n.ID, false)
	if rep.GetStatus() != "failed" || !strings.Contains(rep.GetMessage(), "phase hardware failed") {
		t.Fatalf("run ended %s: %s", rep.GetStatus(), rep.GetMessage())
	}
	v := verdict(rep, "nvme/0", "hardware")
	if v == nil {
		t.Fatalf("no nvme/0 hardware verdict in %v", rep.GetVerdicts())
	}
	text, _ := curev1.SplitEvidence(v.GetMessage())
	t.Logf("nvme/0 hardware: %s", v.GetMessage())
	re := regexp.MustCompile(`^0000:01:00\.0 link 2\.5 GT/s x1, capable 2\.5 GT/s x1, port (0000:00:[0-9a-f]{2}\.0) capable 2\.5 GT/s x1; SKU wants gen4 x4$`)
	m := re.FindStringSubmatch(text)
	if v.GetStatus() != curev1.VerdictStatus_FAIL || m == nil || v.GetObserved() != "2.5 GT/s x1" || v.GetExpected() != "gen4 x4" {
		t.Fatalf("nvme/0 hardware verdict %v, want FAIL matching %s", v, re)
	}
	port := m[1]
	// The inventory has every link; the root port is the narrowed one.
	var found bool
	for _, l := range rep.GetInventory().GetInventory().GetPcieLinks() {
		if l.GetAddress() == "0000:01:00.0" {
			found = true
			if l.GetPort() != port || l.GetPortMaxSpeedGts() != 2.5 || l.GetPortMaxWidth() != 1 || l.GetSpeedGts() != 2.5 || l.GetWidth() != 1 {
				t.Errorf("drive link %v", l)
			}
		}
	}
	if !found {
		t.Errorf("no link for 0000:01:00.0 in %v", rep.GetInventory().GetInventory().GetPcieLinks())
	}
	p := part(rep, "nvme/0")
	if p == nil || p.GetSerial() != n.Serial || p.GetModel() != "QEMU NVMe Ctrl" || p.GetLink() != "2.5 GT/s x1 of 2.5 GT/s x1 (port "+port+": 2.5 GT/s x1)" ||
		!strings.Contains(p.GetLocation(), "PCI 0000:01:00.0") {
		t.Errorf("nvme/0 part %v", p)
	}
	var pciLine bool
	for _, l := range p.GetKernelLog() {
		pciLine = pciLine || strings.Contains(l, "pci 0000:01:00.0:")
	}
	if !pciLine {
		t.Errorf("nvme/0 part has no kernel line of 0000:01:00.0: %q", p.GetKernelLog())
	}
	page := htmlReport(t, env, rep)
	for _, want := range []string{`id="parts"`, "serial " + n.Serial, "link 2.5 GT/s x1 of 2.5 GT/s x1"} {
		if !strings.Contains(page, want) {
			t.Errorf("HTML report lacks %q", want)
		}
	}
	got := phaseStatuses(t, openStore(t, env), rep.GetRunId())
	for _, ph := range []modes.PhaseName{modes.NVMe, modes.SEDRevert, modes.OSInstall} {
		if _, ran := got[ph]; ran {
			t.Errorf("phase %s ran after the hardware gate failed", ph)
		}
	}
}

// TestMachineCheckInReport injects a corrected memory error into the guest
// while its diagnostic suite runs (the QEMU monitor's mce command: CPU 0,
// bank 9, MCi_STATUS VAL|EN|MISCV|ADDRV with a memory-controller read
// error code, address 0x1000). The runner shortens the kernel's
// machine-check poll for the run, so the kernel logs the error within
// seconds; after the suite the runner judges the boot's machine checks:
// the address maps to the node's one DIMM (SMBIOS), and the verdict and
// the report name it by slot and serial with the kernel's lines.
//
// An uncorrected error is not injected: under TCG the guest CPU is an AMD
// family 15 model without MCA recovery, and the kernel panics on it.
func TestMachineCheckInReport(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	// One attempt: a retried validate phase would judge the same boot's
	// machine check again.
	env := startEnv(t, harness.Options{PhaseAttempts: 1})
	n := env.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	runID, err := env.Run(ctx, n.ID, modes.Diagnostic, "qemu-diagnostic", false)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var once sync.Once
	var injected string
	var injectErr error
	rep, err := env.Follow(ctx, runID, func(e *curev1.TimelineEntry) {
		t.Logf("%6.1fs %-6s %-20s %-11s %-8s %s", time.Since(start).Seconds(), e.GetSource(), e.GetPhase(), e.GetKind(), e.GetStatus(), e.GetMessage())
		if e.GetKind() == "log" && strings.Contains(e.GetMessage(), "machine-check banks every") {
			once.Do(func() {
				injected, injectErr = n.Machine.HumanMonitorCommand(ctx, "mce 0 9 0x9c0000000000009f 0 0x1000 0x86")
				t.Logf("injected a corrected memory error: %q %v", injected, injectErr)
			})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if injectErr != nil {
		t.Fatalf("monitor command: %v", injectErr)
	}
	if strings.TrimSpace(injected) != "" {
		t.Fatalf("the monitor refused the injection: %q", injected)
	}
	if rep.GetStatus() != "failed" {
		t.Errorf("diagnostic with a machine check ended %s: %s", rep.GetStatus(), rep.GetMessage())
	}
	v := verdict(rep, "dimm/DIMM 0", "hardware_errors")
	if v == nil {
		t.Fatalf("no dimm/DIMM 0 hardware_errors verdict in %v", rep.GetVerdicts())
	}
	t.Logf("dimm/DIMM 0 hardware_errors: %s", v.GetMessage())
	dimmSerial := n.Serial + "-DIMM"
	if v.GetStatus() != curev1.VerdictStatus_FAIL || v.GetObserved() != "correctedErrors=1 uncorrectedErrors=0" ||
		!strings.Contains(v.GetMessage(), "serial "+dimmSerial) ||
		!strings.Contains(v.GetMessage(), "CPU 0 bank 9: corrected memory controller read error, status 0x9c0000000000009f, address 0x1000") {
		t.Errorf("verdict %v", v)
	}
	p := part(rep, "dimm/DIMM 0")
	if p == nil || p.GetSerial() != dimmSerial || p.GetPartNumber() != "CURE-QEMU-DIMM" || !strings.HasPrefix(p.GetLocation(), "slot DIMM 0") {
		t.Fatalf("dimm part %v", p)
	}
	var header bool
	for _, l := range p.GetKernelLog() {
		header = header || strings.Contains(l, "mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 9: 9c0000000000009f")
	}
	if !header {
		t.Errorf("the part's kernel lines lack the machine check: %q", p.GetKernelLog())
	}
	// The other checks ran and passed: the error is the DIMM's alone.
	for _, v := range rep.GetVerdicts() {
		if v.GetComponent() != "dimm/DIMM 0" && (v.GetStatus() == curev1.VerdictStatus_FAIL || v.GetStatus() == curev1.VerdictStatus_ERROR) {
			t.Errorf("another failure: %s %s %s: %s", v.GetComponent(), v.GetCheck(), v.GetStatus(), v.GetMessage())
		}
	}
	var wide bytes.Buffer
	render.PrintReportWide(&wide, rep)
	if !strings.Contains(wide.String(), "dimm/DIMM 0  FAIL  QEMU") || !strings.Contains(wide.String(), "serial "+dimmSerial) {
		t.Errorf("curectl report:\n%s", wide.String())
	}
	if page := htmlReport(t, env, rep); !strings.Contains(page, "Machine Check: 0 Bank 9") {
		t.Error("HTML report lacks the machine check line")
	}
}
