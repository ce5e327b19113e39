package qemutest

import (
	"context"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/qemu-test/harness"
	"github.com/cure-oss/cure/qemu-test/vbmc"
	"google.golang.org/grpc"
)

// TestServiceModeKeepsDisks: a node provisioned with the host OS is drained
// and serviced. The service run flashes the BMC out of band, applies a BIOS
// setting (verified after its reboot) and tries the pinned NVMe firmware
// in band: QEMU's controller refuses the download (it cannot be flashed),
// which proves the in-band update ran in service mode and reached the
// controller, and the run stops there. With the NVMe pin set back to what
// the controller runs, the run resumes, the node boots its installed OS
// again and that OS calls back with the token its provision left (no seed
// is rewritten). Service never writes a disk: the whole disk image's
// checksum is the same after both runs as right after the provision.
func TestServiceModeKeepsDisks(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	env := startEnv(t, harness.Options{PhaseAttempts: 1, Firmware: fwInventory()})
	n := env.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()

	prov := provisionAndWait(t, env, n.ID, false)
	if prov.GetStatus() != "succeeded" {
		t.Fatalf("provision ended %s: %s", prov.GetStatus(), prov.GetMessage())
	}
	checkDisk(t, env, n)
	deployed := fileSum(t, n.Disk)

	// The site pins a new BMC firmware, a BIOS setting and NVMe firmware
	// after the node was deployed (EditManifest replaces the previous
	// edit: every pin goes in each).
	bmcArt, err := env.AddFirmwarePackage(pinBMC.redfishID, pinBMC.version)
	if err != nil {
		t.Fatal(err)
	}
	nvmeArt, err := env.AddFirmwarePackage("NVME", "8.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pin := func(nvmeVersion string, nvme *manifests.Artifact) {
		t.Helper()
		if err := env.EditManifest(func(sku *manifests.SKU) {
			for i := range sku.Spec.Firmware {
				if sku.Spec.Firmware[i].Component == manifests.ComponentNVMe {
					sku.Spec.Firmware[i].Version, sku.Spec.Firmware[i].Artifact = nvmeVersion, nvme
				}
			}
			sku.Spec.Firmware = append(sku.Spec.Firmware, manifests.Firmware{Name: pinBMC.name, Component: pinBMC.component, Via: "redfish",
				Match: manifests.Match{RedfishID: pinBMC.redfishID}, Version: pinBMC.version, Gate: "equal", Artifact: bmcArt, Activation: pinBMC.activation})
			sku.Spec.BIOS = &manifests.BIOS{Settings: map[string]any{"ProcTurboMode": "Disabled"}}
		}); err != nil {
			t.Fatal(err)
		}
	}
	pin("8.0.1", nvmeArt)
	if got := n.BMC.BiosAttributes()["ProcTurboMode"]; got == "Disabled" {
		t.Fatalf("ProcTurboMode already %v", got)
	}

	// A node in service is the scheduler's: service is refused until it is
	// drained.
	if _, err := env.Run(ctx, n.ID, modes.Service, "", false); err == nil || !strings.Contains(err.Error(), "in_service") {
		t.Fatalf("service of an in-service node: %v", err)
	}
	for _, call := range []func(context.Context, *curev1.PoolRequest, ...grpc.CallOption) (*curev1.PoolResponse, error){env.Client.Drain, env.Client.MarkDrained} {
		if _, err := call(ctx, &curev1.PoolRequest{NodeIds: []string{n.ID}, Reason: "firmware day"}); err != nil {
			t.Fatal(err)
		}
	}

	rep := followRun(t, env, modes.Service, false, nil)
	if rep.GetStatus() != "failed" || !strings.Contains(rep.GetMessage(), "phase nvme failed") {
		t.Fatalf("service with an NVMe QEMU cannot flash ended %s: %s", rep.GetStatus(), rep.GetMessage())
	}
	if v := verdict(rep, "nvme/0", "firmware_update"); v == nil || v.GetStatus() != curev1.VerdictStatus_FAIL || !strings.Contains(v.GetMessage(), "0x4001") {
		t.Errorf("nvme/0 firmware_update = %v, want the controller's refusal (0x4001): the update must run in service", v)
	}
	if got := firmwareVersion(t, n, "BMC"); got != bmcTarget {
		t.Errorf("BMC runs %s after service, want %s", got, bmcTarget)
	}
	if got := n.BMC.BiosAttributes()["ProcTurboMode"]; got != "Disabled" {
		t.Errorf("ProcTurboMode = %v after service", got)
	}
	if v := verdict(rep, "bios", "settings"); v == nil || v.GetStatus() != curev1.VerdictStatus_PASS {
		t.Errorf("bios settings verdict = %v, want PASS (verified after the reboot)", v)
	}
	if got := fileSum(t, n.Disk); got != deployed {
		t.Fatal("the service run changed the disk's bytes")
	}

	// The NVMe pin back to what QEMU runs; the run resumes and returns the
	// node to its installed OS.
	pin("7.2.22", nil)
	rep = followRun(t, env, modes.Service, true, nil)
	if rep.GetStatus() != "succeeded" {
		t.Fatalf("resumed service ended %s: %s", rep.GetStatus(), rep.GetMessage())
	}
	st := openStore(t, env)
	ps := storePhases(t, st, rep.GetRunId())
	// The resumed attempt found the NVMe at its (new) pin: nothing to do.
	for p, want := range map[modes.PhaseName]string{modes.BMC: "ok", modes.BIOSSettings: "ok", modes.NVMe: "skipped", modes.SetBootDisk: "ok", modes.WaitForHostOS: "ok"} {
		if runstate.PhaseName(ps[p].Status) != want {
			t.Errorf("phase %s = %s, want %s: %s", p, ps[p].Status, want, ps[p].Message)
		}
	}
	for _, p := range []modes.PhaseName{modes.SEDRevert, modes.OSInstall} {
		if _, ran := ps[p]; ran {
			t.Errorf("service ran %s", p)
		}
	}
	// The OS that called back is the one the provision installed: its
	// seed (instance id = the provision's run) was never rewritten.
	if countEvents(storeEvents(t, st, rep.GetRunId()), func(e store.Event) bool {
		return e.Kind == "host_ready" && strings.Contains(e.Message, "instance_id="+prov.GetRunId())
	}) != 1 {
		t.Error("no host_ready callback from the provision's installed OS in the service run")
	}
	if devs := bootDevices(n); len(devs) == 0 || devs[len(devs)-1] != string(vbmc.BootHdd) {
		t.Errorf("last boot %v, want Hdd", devs)
	}
	if got := fileSum(t, n.Disk); got != deployed {
		t.Fatal("service changed the disk's bytes")
	}
	if _, err := env.Client.ReturnToPool(ctx, &curev1.PoolRequest{NodeIds: []string{n.ID}}); err != nil {
		t.Errorf("return after service: %v", err)
	}
}
