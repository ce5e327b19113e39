package pipeline_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// fwPackage writes a virtual-BMC firmware package into the artifact store.
func fwPackage(t *testing.T, casDir, component, version string) *manifests.Artifact {
	t.Helper()
	payload := []byte(strings.Repeat("firmware-"+version, 512))
	sum := sha256.Sum256(payload)
	pkg := append(vbmc.PackageHeader{Component: component, Version: version, Size: int64(len(payload)), SHA256: hex.EncodeToString(sum[:])}.Line(), payload...)
	psum := sha256.Sum256(pkg)
	hexsum := hex.EncodeToString(psum[:])
	if err := os.WriteFile(filepath.Join(casDir, hexsum), pkg, 0o644); err != nil {
		t.Fatal(err)
	}
	return &manifests.Artifact{SHA256: hexsum, Size: int64(len(pkg)), Format: "bin"}
}

// allDrift pins new BMC, BIOS and HGX GPU firmware and one BIOS attribute.
func allDrift(t *testing.T) func(*manifests.SKU, string) {
	return func(sku *manifests.SKU, cas string) {
		sku.Spec.Firmware = append(sku.Spec.Firmware,
			manifests.Firmware{Name: "bmc", Component: "bmc", Via: "redfish", Match: manifests.Match{RedfishID: "BMC"}, Version: "1.50.0", Gate: "equal",
				Artifact: fwPackage(t, cas, "BMC", "1.50.0"), Activation: "bmc-reset"},
			manifests.Firmware{Name: "bios", Component: "bios", Via: "redfish", Match: manifests.Match{RedfishID: "BIOS"}, Version: "2.21.2", Gate: "equal",
				Artifact: fwPackage(t, cas, "BIOS", "2.21.2"), Activation: "host-reboot"},
			manifests.Firmware{Name: "hgx-gpu", Component: "hgx", Via: "redfish", Match: manifests.Match{RedfishID: "HGX_FW_GPU_SXM_*"}, Version: "97.00.0B.00.01", Gate: "equal",
				Artifact: fwPackage(t, cas, "HGX_FW_GPU_SXM_*", "97.00.0B.00.01"), Activation: "host-reboot"},
		)
		sku.Spec.BIOS = &manifests.BIOS{Settings: map[string]any{"ProcTurboMode": "Disabled"}}
	}
}

func TestFirmwareAllDriftThenRerunSkips(t *testing.T) {
	f := newFixture(t, allDrift(t))
	if got := f.bmc.BiosAttributes()["ProcTurboMode"]; got == "Disabled" {
		t.Fatalf("fixture: ProcTurboMode already %v", got)
	}
	runID, err := f.eng.Start(context.Background(), "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run ended %s: %s", r.Status, r.Message)
	}
	if v, _, _ := f.bmc.FirmwareVersion("BMC"); v != "1.50.0" {
		t.Errorf("BMC runs %q", v)
	}
	if v, _, _ := f.bmc.FirmwareVersion("BIOS"); v != "2.21.2" {
		t.Errorf("BIOS runs %q", v)
	}
	for i := 1; i <= 8; i++ {
		id := "HGX_FW_GPU_SXM_" + string(rune('0'+i))
		if v, _, _ := f.bmc.FirmwareVersion(id); v != "97.00.0B.00.01" {
			t.Errorf("%s runs %q", id, v)
		}
	}
	for _, id := range []string{"BMC", "BIOS", "HGX_FW_GPU_SXM_3"} {
		if n := f.bmc.Flashes(id); n != 1 {
			t.Errorf("%s flashed %d times, want once", id, n)
		}
	}
	if n := f.bmc.BMCResets(); n != 1 {
		t.Errorf("BMC resets = %d, want 1", n)
	}
	if got := f.bmc.BiosAttributes()["ProcTurboMode"]; got != "Disabled" {
		t.Errorf("ProcTurboMode = %v after the run", got)
	}
	// power on, BIOS reboot, HGX reboot, BIOS-settings reboot, reboot into the OS
	if r.Reboots != 5 {
		t.Errorf("reboots = %d, want 5", r.Reboots)
	}
	ps := f.phases(runID)
	for _, p := range []modes.PhaseName{modes.BMC, modes.BIOS, modes.HGX, modes.BIOSSettings} {
		if ps[p].Status != curev1.PhaseStatus_PHASE_OK {
			t.Errorf("%s = %s: %s", p, ps[p].Status, ps[p].Message)
		}
	}
	vs, _ := f.st.Verdicts(context.Background(), runID)
	pass := 0
	for _, v := range vs {
		if v.Check == "firmware_update" && v.Status == curev1.VerdictStatus_PASS {
			pass++
		}
	}
	if pass != 10 { // BMC, BIOS, 8 GPUs
		t.Errorf("%d firmware_update PASS verdicts, want 10: %+v", pass, vs)
	}

	// The rerun finds everything at the target and flashes nothing.
	run2, err := f.eng.Start(context.Background(), "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	r2 := f.waitRun(run2)
	if r2.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("rerun ended %s: %s", r2.Status, r2.Message)
	}
	ps2 := f.phases(run2)
	for _, p := range []modes.PhaseName{modes.BMC, modes.BIOS, modes.HGX, modes.BIOSSettings} {
		if ps2[p].Status != curev1.PhaseStatus_PHASE_SKIPPED {
			t.Errorf("rerun %s = %s: %s", p, ps2[p].Status, ps2[p].Message)
		}
	}
	if n := f.bmc.Flashes("BMC"); n != 1 {
		t.Errorf("rerun flashed the BMC again (%d)", n)
	}
	if r2.Reboots != 2 {
		t.Errorf("rerun reboots = %d, want 2", r2.Reboots)
	}
}

func TestLostUpdateResponseNoDoubleFlash(t *testing.T) {
	f := newFixture(t, func(sku *manifests.SKU, cas string) {
		sku.Spec.Firmware = append(sku.Spec.Firmware,
			manifests.Firmware{Name: "bmc", Component: "bmc", Via: "redfish", Match: manifests.Match{RedfishID: "BMC"}, Version: "1.50.0", Gate: "equal",
				Artifact: fwPackage(t, cas, "BMC", "1.50.0"), Activation: "bmc-reset"})
	})
	// The BMC takes the update but its answer never arrives.
	f.bmc.AcceptThenTimeout(8 * time.Second)
	runID, err := f.eng.Start(context.Background(), "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run ended %s: %s", r.Status, r.Message)
	}
	if n := f.bmc.Flashes("BMC"); n != 1 {
		t.Errorf("BMC flashed %d times after a lost response, want exactly once", n)
	}
	if v, _, _ := f.bmc.FirmwareVersion("BMC"); v != "1.50.0" {
		t.Errorf("BMC runs %q", v)
	}
}

func TestAuditReportsDriftChangesNothing(t *testing.T) {
	f := newFixture(t, allDrift(t))
	runID, err := f.eng.Start(context.Background(), "node1", modes.Audit, "", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("audit ended %s: %s", r.Status, r.Message)
	}
	for _, id := range []string{"BMC", "BIOS", "HGX_FW_GPU_SXM_1"} {
		if n := f.bmc.Flashes(id); n != 0 {
			t.Errorf("audit flashed %s", id)
		}
	}
	if f.bmc.BMCResets() != 0 || len(f.bmc.StagedBiosAttributes()) != 0 {
		t.Error("audit reset the BMC or staged BIOS attributes")
	}
	vs, _ := f.st.Verdicts(context.Background(), runID)
	drift := map[string]bool{}
	for _, v := range vs {
		if v.Status == curev1.VerdictStatus_DRIFT {
			drift[v.Component] = true
		}
	}
	for _, c := range []string{"bmc", "bios", "hgx/HGX_FW_GPU_SXM_1", "hgx/HGX_FW_GPU_SXM_8"} {
		if !drift[c] {
			t.Errorf("audit did not report %s as DRIFT: %v", c, drift)
		}
	}
	if drift["hgx/HGX_FW_NVSwitch_0"] {
		t.Error("audit reported an unpinned component")
	}
}

func TestVerifyChecksEveryArtifactAppliesNothing(t *testing.T) {
	var cas string
	f := newFixture(t, func(sku *manifests.SKU, dir string) {
		cas = dir
		allDrift(t)(sku, dir)
		sku.Spec.Firmware[0].Artifact = fwPackage(t, dir, "NVME", "7.2.22")
	})
	runID, err := f.eng.Start(context.Background(), "node1", modes.Verify, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.waitRun(runID); r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("verify ended %s: %s", r.Status, r.Message)
	}
	vs, _ := f.st.Verdicts(context.Background(), runID)
	verified := 0
	for _, v := range vs {
		if v.Check == "artifact" && v.Status == curev1.VerdictStatus_PASS {
			verified++
		}
	}
	if verified != 5 { // nvme, bmc, bios, hgx-gpu firmware + the OS image
		t.Errorf("%d artifacts verified, want 5: %+v", verified, vs)
	}
	if f.bmc.Flashes("BMC") != 0 || f.bmc.BMCResets() != 0 || len(f.bmc.StagedBiosAttributes()) != 0 {
		t.Error("verify changed the node")
	}

	// A corrupted artifact fails verify before the node is touched.
	entries, _ := os.ReadDir(cas)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(cas, e.Name()))
		if strings.Contains(string(b[:min(len(b), 200)]), `"component":"BMC"`) {
			b[len(b)-1] ^= 0xff
			if err := os.WriteFile(filepath.Join(cas, e.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	boots := len(f.m.Boots())
	run2, err := f.eng.Start(context.Background(), "node1", modes.Verify, "", false)
	if err != nil {
		t.Fatal(err)
	}
	r2 := f.waitRun(run2)
	if r2.Status != curev1.RunStatus_RUN_FAILED || r2.Phase != modes.Preflight {
		t.Fatalf("verify with a corrupted artifact = %s at %s: %s", r2.Status, r2.Phase, r2.Message)
	}
	if len(f.m.Boots()) != boots {
		t.Error("a failed verify still booted the node")
	}
	vs, _ = f.st.Verdicts(context.Background(), run2)
	for _, v := range vs {
		if v.Component == "firmware/bmc" && (v.Status != curev1.VerdictStatus_FAIL || !strings.Contains(v.Message, "sha256")) {
			t.Errorf("corrupted bmc artifact verdict %+v", v)
		}
	}
}

// Dell-style inventory: member Ids carry the version, so the update renames
// the member and leaves a Previous- one. The manifest selects by Name; the
// run flashes once, verifies the renamed member and counts it updated.
func TestFirmwareVersionedIDsByName(t *testing.T) {
	f := newFixtureBMC(t, func(sku *manifests.SKU, cas string) {
		sku.Spec.Firmware = append(sku.Spec.Firmware,
			manifests.Firmware{Name: "bmc", Component: "bmc", Via: "redfish", Match: manifests.Match{Name: "Contoso BMC Firmware"}, Version: "1.50.0", Gate: "equal",
				Artifact: fwPackage(t, cas, "BMC", "1.50.0"), Activation: "bmc-reset"})
	}, func(c *vbmc.Config) { c.InventoryIDs = "versioned" })
	runID, err := f.eng.Start(context.Background(), "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.waitRun(runID); r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run ended %s: %s", r.Status, r.Message)
	}
	if v, _, _ := f.bmc.FirmwareVersion("BMC"); v != "1.50.0" || f.bmc.Flashes("BMC") != 1 {
		t.Fatalf("BMC runs %q after %d flashes", v, f.bmc.Flashes("BMC"))
	}
	if ps := f.phases(runID); ps[modes.BMC].Status != curev1.PhaseStatus_PHASE_OK || !strings.Contains(ps[modes.BMC].Message, "1 updated to 1.50.0") {
		t.Fatalf("bmc phase = %s: %s", ps[modes.BMC].Status, ps[modes.BMC].Message)
	}
	vs, _ := f.st.Verdicts(context.Background(), runID)
	pass := 0
	for _, v := range vs {
		if v.Check == "firmware_update" && v.Status == curev1.VerdictStatus_PASS && v.Observed == "1.50.0" {
			pass++
		}
	}
	if pass != 1 {
		t.Fatalf("%d firmware_update PASS verdicts on the renamed member, want 1: %+v", pass, vs)
	}
}

// A flash after which the BMC reports a version the gate cannot read is an
// ERROR verdict naming the value, under either gate: not "did not change",
// and not a success.
func TestFirmwareGateErrorAfterFlash(t *testing.T) {
	for _, gate := range []string{manifests.GateAtLeast, manifests.GateEqual} {
		t.Run(gate, func(t *testing.T) {
			f := newFixture(t, func(sku *manifests.SKU, cas string) {
				sku.Spec.Firmware = append(sku.Spec.Firmware,
					manifests.Firmware{Name: "bmc", Component: "bmc", Via: "redfish", Match: manifests.Match{RedfishID: "BMC"}, Version: "1.50.0", Gate: gate,
						Artifact: fwPackage(t, cas, "BMC", "Not Present"), Activation: "bmc-reset"})
			})
			runID, err := f.eng.Start(context.Background(), "node1", modes.Provision, "", false)
			if err != nil {
				t.Fatal(err)
			}
			r := f.waitRun(runID)
			if r.Status != curev1.RunStatus_RUN_FAILED || r.Phase != modes.BMC || !strings.Contains(r.Message, "Not Present") {
				t.Fatalf("run ended %s at %s: %s; want failed at bmc naming the value", r.Status, r.Phase, r.Message)
			}
			// Under at-least the retry's plan already says ERROR; under
			// equal an unreadable version is only "not equal" before a
			// flash, so the retry flashes again and says ERROR again.
			if n := f.bmc.Flashes("BMC"); n < 1 || (gate == manifests.GateAtLeast && n != 1) {
				t.Errorf("BMC flashed %d times", n)
			}
			vs, _ := f.st.Verdicts(context.Background(), runID)
			var got []string
			for _, v := range vs {
				if v.Check == "firmware_update" {
					got = append(got, v.Component+"="+runstate.VerdictName(v.Status)+": "+v.Message)
					if v.Status != curev1.VerdictStatus_ERROR || v.Observed != "Not Present" || !strings.Contains(v.Message, `running version "Not Present" cannot be judged`) ||
						strings.Contains(v.Message, "did not") {
						t.Errorf("verdict %+v: want an ERROR naming the value", v)
					}
				}
			}
			if len(got) != 1 { // a verdict is kept per component and check
				t.Errorf("firmware_update verdicts %q, want one ERROR", got)
			}
		})
	}
}
