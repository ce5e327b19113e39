package conformance

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/manifests/fwplan"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/runner/inventory"
	"github.com/cure-oss/cure/runner/phases"
	"github.com/cure-oss/cure/tools/nvme"
)

// planCase is one firmware plan in the abstract: devices by key and
// running version; entries whose selector names one key, "*" (all), "none"
// (a key no device has) or "[" (a malformed glob). want is each check as
// entry/key=STATUS, "-" for no entry or no device.
type planCase struct {
	name    string
	devs    [][2]string // key, running version
	entries []planEntry
	want    string
	names   string // a value every ERROR's message must carry, when set
}

type planEntry struct{ name, sel, version, gate string }

// oobSide and nvmeSide write a case as the coordinator's and the runner's
// devices and selectors: FirmwareInventory members selected by redfishId,
// NVMe controllers selected by model.
func oobSide(c planCase) ([]redfish.FirmwareItem, []manifests.Firmware) {
	var inv []redfish.FirmwareItem
	for _, d := range c.devs {
		inv = append(inv, redfish.FirmwareItem{ID: "HGX_FW_GPU_" + d[0], Name: "GPU firmware", Version: d[1], Updateable: true})
	}
	var fws []manifests.Firmware
	for _, e := range c.entries {
		fws = append(fws, manifests.Firmware{Name: e.name, Component: "hgx", Via: "redfish", Version: e.version, Gate: e.gate,
			Match: manifests.Match{RedfishID: "HGX_FW_GPU_" + e.sel}})
	}
	return inv, fws
}

func nvmeSide(c planCase) ([]*inventory.Controller, []manifests.Firmware) {
	var ctrls []*inventory.Controller
	for i, d := range c.devs {
		ctrls = append(ctrls, &inventory.Controller{Index: i, Info: nvme.Info{Name: fmt.Sprint("nvme", i)},
			Identify: &nvme.Controller{VID: 0x144d, MN: "GPU-" + d[0], SN: "S" + d[0], FR: d[1]}})
	}
	var fws []manifests.Firmware
	for _, e := range c.entries {
		fws = append(fws, manifests.Firmware{Name: e.name, Component: "nvme", Via: "in-band", Version: e.version, Gate: e.gate,
			Match: manifests.Match{Model: "GPU-" + e.sel}})
	}
	return ctrls, fws
}

// outcome renders checks as entry/key=STATUS, the device named by key.
func outcome[D any](checks []fwplan.Check[D], key func(D) string) (string, []string) {
	var p, errs []string
	for _, c := range checks {
		e, k := "-", "-"
		if c.Entry != nil {
			e = c.Entry.Name
		}
		if c.HasDevice {
			k = key(c.Device)
		}
		p = append(p, fmt.Sprintf("%s/%s=%s", e, k, c.Status))
		if c.Status.String() == "ERROR" {
			errs = append(errs, c.Message)
		}
	}
	return strings.Join(p, " "), errs
}

// TestOneFirmwarePlanner: the coordinator's out-of-band kinds (bmc, bios,
// hgx over the FirmwareInventory) and the runner's in-band kinds go
// through the one planner (manifests/fwplan) with the same rules and the
// same gate, and judge a flash the same way after it: a running version
// the gate cannot read after an update is an ERROR naming the value.
func TestOneFirmwarePlanner(t *testing.T) {
	const eq, al = manifests.GateEqual, manifests.GateAtLeast
	cases := []planCase{
		{name: "first matching entry takes the device; an entry left with nothing is an ERROR",
			devs:    [][2]string{{"a", "1.0"}, {"b", "2.0"}},
			entries: []planEntry{{"one", "a", "1.0", eq}, {"all", "*", "2.0", eq}, {"late", "*", "2.0", eq}},
			want:    "one/a=MATCH all/b=MATCH late/-=ERROR", names: "late"},
		{name: "a malformed selector is an ERROR and takes nothing",
			devs:    [][2]string{{"a", "1.0"}, {"b", "2.0"}},
			entries: []planEntry{{"bad", "[", "1.0", eq}, {"all", "*", "1.5", al}},
			want:    "bad/-=ERROR all/a=DRIFT all/b=MATCH", names: "[",
		},
		{name: "an entry matching nothing is an ERROR; unmatched devices are not judged",
			devs:    [][2]string{{"a", "1.0"}},
			entries: []planEntry{{"ghost", "none", "1.0", eq}},
			want:    "ghost/-=ERROR", names: "ghost"},
		{name: "no devices at all", entries: []planEntry{{"e", "*", "1.0", eq}}, want: "e/-=ERROR"},
		{name: "an unreadable version under at-least is an ERROR naming it",
			devs:    [][2]string{{"a", "Not Present"}},
			entries: []planEntry{{"e", "*", "1.0", al}},
			want:    "e/a=ERROR", names: `"Not Present"`},
		{name: "two version families under at-least are an ERROR naming them",
			devs:    [][2]string{{"a", "BF-24.10-17"}},
			entries: []planEntry{{"e", "*", "24.10-20", al}},
			want:    "e/a=ERROR", names: `"BF-24.10-17"`},
		{name: "single hex bytes compare as numbers",
			devs:    [][2]string{{"a", "0x1A"}, {"b", "0x09"}},
			entries: []planEntry{{"e", "*", "0x10", al}},
			want:    "e/a=MATCH e/b=DRIFT"},
		{name: "a pre-release is older than its release",
			devs:    [][2]string{{"a", "2.1.0-rc1"}, {"b", "2.1.0"}},
			entries: []planEntry{{"e", "*", "2.1.0", al}},
			want:    "e/a=DRIFT e/b=MATCH"},
		{name: "platform prefixes gate: same platform orders, another is an ERROR",
			devs:    [][2]string{{"a", "U46 v2.90 (03/14/2024)"}, {"b", "P89 v2.72"}},
			entries: []planEntry{{"u46", "a", "U46 v2.80", al}, {"p", "b", "U46 v2.10", al}},
			want:    "u46/a=MATCH p/b=ERROR", names: `"P89 v2.72"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inv, ofws := oobSide(c)
			coord, cerrs := outcome(fwplan.Plan(pipeline.OOBKind("hgx"), ofws, inv), func(it redfish.FirmwareItem) string {
				return strings.TrimPrefix(it.ID, "HGX_FW_GPU_")
			})
			ctrls, nfws := nvmeSide(c)
			runner, rerrs := outcome(fwplan.Plan(phases.NVMeKind(), nfws, ctrls), func(c *inventory.Controller) string {
				return strings.TrimPrefix(c.Model(), "GPU-")
			})
			if coord != c.want || runner != c.want {
				t.Errorf("plans differ from the rules:\ncoordinator %s\nrunner      %s\nwant        %s", coord, runner, c.want)
			}
			for _, msg := range append(cerrs, rerrs...) {
				if c.names != "" && !strings.Contains(msg, c.names) {
					t.Errorf("ERROR %q does not name %s", msg, c.names)
				}
			}
		})
	}

	// One rule is the coordinator's own, and says so: over Redfish a
	// selector without a wildcard names one member (OpenBMC names every
	// member "Software Inventory"); NVMe drives of one model are many.
	t.Run("a literal selector over several members is an ERROR over Redfish only", func(t *testing.T) {
		c := planCase{devs: [][2]string{{"a", "1.0"}, {"b", "1.0"}}, entries: []planEntry{{"e", "*", "1.0", eq}}}
		inv, ofws := oobSide(c)
		ofws[0].Match = manifests.Match{Name: "GPU firmware"}
		coord, errs := outcome(fwplan.Plan(pipeline.OOBKind("hgx"), ofws, inv), func(it redfish.FirmwareItem) string { return it.ID })
		if coord != "e/-=ERROR" || !strings.Contains(errs[0], "HGX_FW_GPU_a, HGX_FW_GPU_b") {
			t.Errorf("coordinator %s %q", coord, errs)
		}
		ctrls, nfws := nvmeSide(c)
		for _, ct := range ctrls {
			ct.Identify.MN = "GPU-same"
		}
		nfws[0].Match = manifests.Match{Model: "GPU-same"}
		if runner, _ := outcome(fwplan.Plan(phases.NVMeKind(), nfws, ctrls), func(c *inventory.Controller) string { return c.Info.Name }); runner != "e/nvme0=MATCH e/nvme1=MATCH" {
			t.Errorf("runner %s", runner)
		}
	})

	// After a flash both sides judge the running version the same way
	// (fwplan.Confirm), on every vendor form: PASS, FAIL, or an ERROR that
	// names the value when the gate cannot read it, under either gate.
	t.Run("after a flash", func(t *testing.T) {
		forms := append(captureVersions(t), vendorForms...)
		for _, gate := range []string{eq, al} {
			for _, running := range forms {
				for _, want := range []string{"2.55", "U46 v1.56", "1.45.455b66-rev4"} {
					fw := manifests.Firmware{Name: "fw", Gate: gate, Version: want}
					cs, cmsg := pipeline.ConfirmVerdict(fw, running)
					rs, rmsg := phases.ConfirmVerdict(fw, running)
					if cs != rs || cmsg != rmsg {
						t.Errorf("gate %s, running %q, desired %q: coordinator %s (%s), runner %s (%s)", gate, running, want, cs, cmsg, rs, rmsg)
					}
					if cs == curev1.VerdictStatus_ERROR && !strings.Contains(cmsg, fmt.Sprintf("%q", strings.TrimSpace(running))) {
						t.Errorf("gate %s, running %q: ERROR %q does not name the value", gate, running, cmsg)
					}
				}
			}
			for _, unreadable := range []string{"Not Present", "N/A", "", "1.2 3"} {
				fw := manifests.Firmware{Name: "fw", Gate: gate, Version: "1.2.3"}
				if s, msg := pipeline.ConfirmVerdict(fw, unreadable); s != curev1.VerdictStatus_ERROR || !strings.Contains(msg, fmt.Sprintf("%q cannot be judged", unreadable)) {
					t.Errorf("gate %s: after a flash, running %q = %s (%s); want an ERROR naming it", gate, unreadable, s, msg)
				}
			}
		}
	})
}
