package conformance

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/qemu-test/vbmc"
	"github.com/cure-oss/cure/runner/phases"
)

// vendorForms are version strings real BMCs report (HPE iLO, Lenovo XCC,
// Supermicro, Dell iDRAC, NVIDIA BlueField/HGX), beside what the mockups and
// profiles under qemu-test/vbmc carry (read by captureVersions).
var vendorForms = []string{
	"2.55 Oct 01 2021", "2.72 Sep 04 2022", "U30 v2.54 (04/18/2024)", "iLO 5 v2.72",
	"TGBT42S 2.83 2023-07-05", "11.2.0 Build 44", "BIOS Date: 08/04/2023 Ver 1.4",
	"0x00 0x0b 0x03 0x04", "1.45.455b66-rev4", "P2.1.4", "BF-24.10-17", "96.00.A5.00.01",
	"7.00.00.171", "2.19.1", "HGX-22.10-1-rc57", "U46 v1.56 (11/29/2021)", "1.2 0", // HPE's SPS descriptor
	"Not Present", "N/A", "", "1.2 3",
}

// captureVersions collects every Version, FirmwareVersion and BiosVersion
// in the virtual BMC's mockups and profile captures, so a new capture's
// forms are covered.
func captureVersions(t *testing.T) []string {
	var out []string
	root := filepath.Join("..", "vbmc")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".json") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var v any
		if json.Unmarshal(b, &v) != nil {
			return nil // not every file is a resource
		}
		walkVersions(v, &out)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func walkVersions(v any, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && (k == "Version" || k == "FirmwareVersion" || k == "BiosVersion") {
				*out = append(*out, s)
			}
			walkVersions(x, out)
		}
	case []any:
		for _, x := range v {
			walkVersions(x, out)
		}
	}
}

// TestVersionFormsAgree: the coordinator's Redfish phases and the runner's
// in-band phases give the same verdict, error included, on every version
// form, under both gates, against desired versions of every kind.
func TestVersionFormsAgree(t *testing.T) {
	forms := append(slices.Clone(vendorForms), captureVersions(t)...)
	for _, p := range vbmc.Profiles() { // the versions each profile's BMC reports
		for _, f := range p.Apply(vbmc.Config{}).Firmware {
			forms = append(forms, f.Version)
		}
	}
	slices.Sort(forms)
	forms = slices.Compact(forms)
	if len(forms) < len(vendorForms)+3 {
		t.Fatalf("only %d version forms found; the captures under qemu-test/vbmc were not read", len(forms))
	}
	desired := append(slices.Clone(forms), "1.0", "99", "P9.9.9")
	errs := map[string]int{}
	for _, gate := range []string{manifests.GateEqual, manifests.GateAtLeast} {
		for _, running := range forms {
			for _, want := range desired {
				fw := manifests.Firmware{Name: "fw", Gate: gate, Version: want}
				cs, cmsg := pipeline.GateVerdict(fw, running)
				rs, rmsg := phases.GateVerdict(fw, running)
				if cs != rs {
					t.Errorf("gate %s, running %q, desired %q: coordinator %s (%s), runner %s (%s)", gate, running, want, cs, cmsg, rs, rmsg)
				}
				if cs == curev1.VerdictStatus_ERROR {
					errs[gate]++
					if cmsg != rmsg {
						t.Errorf("gate %s, running %q, desired %q: errors differ: coordinator %q, runner %q", gate, running, want, cmsg, rmsg)
					}
				}
			}
		}
	}
	// The comparison is exercised on both sides of the error line: equal
	// never errs, at-least errs on what cannot be ordered.
	if errs[manifests.GateEqual] != 0 || errs[manifests.GateAtLeast] == 0 {
		t.Errorf("ERROR verdicts per gate = %v; want none under equal and some under at-least", errs)
	}
	for _, tc := range []struct {
		running, want string
		status        curev1.VerdictStatus
	}{
		{"2.55 Oct 01 2021", "2.50", curev1.VerdictStatus_MATCH},
		{"2.55 Oct 01 2021", "2.60", curev1.VerdictStatus_DRIFT},
		{"Not Present", "2.60", curev1.VerdictStatus_ERROR},
	} {
		fw := manifests.Firmware{Name: "bmc", Gate: manifests.GateAtLeast, Version: tc.want}
		if s, msg := pipeline.GateVerdict(fw, tc.running); s != tc.status || (s == curev1.VerdictStatus_ERROR && !strings.Contains(msg, tc.running)) {
			t.Errorf("at-least %q over %q = %s (%s), want %s naming the value", tc.want, tc.running, s, msg, tc.status)
		}
	}
}

// TestVendorFormsTableCoversProfiles: every version a vendor profile's BMC
// reports is a running value in the table TestVendorVersionForms
// (manifests/version) checks, so a new profile comes with its rows.
func TestVendorFormsTableCoversProfiles(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "manifests", "version", "testdata", "vendor_forms.txt"))
	if err != nil {
		t.Fatal(err)
	}
	running := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Split(l, " | "); len(f) == 5 && !strings.HasPrefix(l, "#") {
			running[f[1]] = true
		}
	}
	firmware := vbmc.DefaultFirmware()
	for _, p := range vbmc.Profiles() {
		firmware = append(firmware, p.Apply(vbmc.Config{}).Firmware...)
	}
	for _, f := range firmware {
		if !running[f.Version] {
			t.Errorf("%s version %q is in no row of manifests/version/testdata/vendor_forms.txt", f.ID, f.Version)
		}
	}
}
