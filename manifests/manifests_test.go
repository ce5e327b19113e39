package manifests

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

type want struct {
	line  int
	field string
	msg   string
}

// readWants collects the "# want LINE FIELD MESSAGE" comments at the end of a
// bad manifest; FIELD "-" means the error names no field.
func readWants(t *testing.T, path string) []want {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ws []want
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "# want ")
		if !ok {
			continue
		}
		parts := strings.SplitN(rest, " ", 3)
		if len(parts) != 3 {
			t.Fatalf("%s: malformed want comment %q", path, sc.Text())
		}
		line, err := strconv.Atoi(parts[0])
		if err != nil {
			t.Fatalf("%s: want line %q: %v", path, parts[0], err)
		}
		field := parts[1]
		if field == "-" {
			field = ""
		}
		ws = append(ws, want{line, field, parts[2]})
	}
	if len(ws) == 0 {
		t.Fatalf("%s has no # want comments", path)
	}
	return ws
}

func TestBadManifests(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bad manifests found: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			wants := readWants(t, path)
			doc, err := LoadFile(path)
			if err == nil {
				t.Fatalf("LoadFile(%s) = %+v, want an error", path, doc)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error is %T, want *ValidationError: %v", err, err)
			}
			if len(ve.Errors) != len(wants) {
				t.Errorf("got %d errors, want %d:\n%v", len(ve.Errors), len(wants), err)
			}
			for i := range min(len(ve.Errors), len(wants)) {
				got, w := ve.Errors[i], wants[i]
				if got.File != path || got.Line != w.line || got.Field != w.field || !strings.Contains(got.Msg, w.msg) {
					t.Errorf("error %d = %q\nwant %s:%d: %s: ...%s...", i, got.Error(), path, w.line, w.field, w.msg)
				}
			}
			// One line per error, so the whole set reads at a glance.
			if n := strings.Count(err.Error(), "\n") + 1; n != len(ve.Errors) {
				t.Errorf("Error() has %d lines for %d errors", n, len(ve.Errors))
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	_, err := LoadFile("testdata/bad/firmware.yaml")
	const line = `testdata/bad/firmware.yaml:35: spec.firmware[3].version: "28.39..x" is not a valid version: empty segment at offset 6`
	if err == nil || !strings.Contains(err.Error(), line+"\n") {
		t.Fatalf("error does not contain the line\n%s\ngot:\n%v", line, err)
	}
}

func TestEmptyManifest(t *testing.T) {
	for _, data := range []string{"", "# only a comment\n"} {
		_, err := Parse("empty.yaml", []byte(data))
		if err == nil || err.Error() != "empty.yaml: empty manifest: no YAML document" {
			t.Errorf("Parse(%q) error = %v", data, err)
		}
	}
	_, err := Parse("list.yaml", []byte("- a\n- b\n"))
	if err == nil || err.Error() != "list.yaml:1: expected a mapping, found a list" {
		t.Errorf("Parse(list) error = %v", err)
	}
}

func TestLoadFileMissing(t *testing.T) {
	_, err := LoadFile("testdata/does-not-exist.yaml")
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "does-not-exist.yaml") {
		t.Fatalf("LoadFile(missing) error = %v, want a wrapped not-exist error naming the file", err)
	}
}

func examples(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"examples/*.yaml", "examples/suites/*.yaml", "testdata/*.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 3 {
		t.Fatalf("found only %v", files)
	}
	return files
}

func TestExamplesLoadAndRoundTrip(t *testing.T) {
	for _, path := range examples(t) {
		t.Run(path, func(t *testing.T) {
			doc, err := LoadFile(path)
			if err != nil {
				t.Fatalf("example does not load:\n%v", err)
			}
			out, err := Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Parse("roundtrip.yaml", out)
			if err != nil {
				t.Fatalf("marshalled output does not parse:\n%v\n%s", err, out)
			}
			if !reflect.DeepEqual(doc, back) {
				t.Fatalf("round trip changed the manifest\nbefore: %#v\nafter:  %#v\nyaml:\n%s", doc, back, out)
			}
			again, err := Marshal(back)
			if err != nil || string(again) != string(out) {
				t.Fatalf("Marshal is not stable (err %v):\n%s\n---\n%s", err, out, again)
			}
		})
	}
}

func TestQEMUExample(t *testing.T) {
	sku, err := LoadSKU("examples/qemu-nvme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []Firmware{{
		Name: "nvme-qemu", Component: ComponentNVMe, Via: ViaInBand,
		Match: Match{Model: "QEMU NVMe Ctrl"}, Version: "7.2.22", Gate: GateEqual,
		Artifact: &Artifact{
			SHA256: "70dc61be9e56ec72ddd6634d72353a2f94841db5c8040499bd97817182028156",
			Size:   65536, Format: "bin",
		},
		Activation: ActivationNVMeReset,
	}}
	if !reflect.DeepEqual(sku.Spec.Firmware, want) {
		t.Errorf("firmware = %#v\nwant %#v", sku.Spec.Firmware, want)
	}
	for _, c := range []string{ComponentBMC, ComponentBIOS, ComponentHGX} {
		if fw := sku.FirmwareFor(c); len(fw) != 0 {
			t.Errorf("FirmwareFor(%s) = %v, want none: the QEMU SKU has no Redfish firmware", c, fw)
		}
	}
	if sku.Spec.OS == nil {
		t.Fatal("spec.os missing")
	}
	os := sku.Spec.OS
	if os.Image.Format != ImageRawZstd || os.TargetDisk != (DiskSelector{Transport: TransportNVMe, Model: "QEMU NVMe Ctrl"}) {
		t.Errorf("os = %+v", os)
	}
	if h, err := os.FirstBoot.RenderHostname("node-7", "SN1"); err != nil || h != "node-7" {
		t.Errorf("hostname = %q, %v; want node-7", h, err)
	}
}

// The e2e harness swaps in the freshly built host OS image and marshals the
// SKU for the coordinator; the runner must read back exactly that.
func TestHarnessRewritesImage(t *testing.T) {
	sku, err := LoadSKU("examples/qemu-nvme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	img := Artifact{SHA256: strings.Repeat("ab", 32), Size: 123456789, Format: ImageRawZstd}
	sku.Spec.OS.Image = img
	out, err := Marshal(sku)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseSKU("assignment", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if back.Spec.OS.Image != img || !reflect.DeepEqual(back, sku) {
		t.Errorf("after rewrite+marshal, image = %+v, want %+v", back.Spec.OS.Image, img)
	}
}

func TestHGXExample(t *testing.T) {
	sku, err := LoadSKU("examples/hgx-b200.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range sku.FirmwareFor(ComponentHGX) {
		names = append(names, f.Name)
		if f.Via != ViaRedfish || !strings.HasPrefix(f.Match.RedfishID, "HGX_FW_") {
			t.Errorf("%s: via %s redfishId %q", f.Name, f.Via, f.Match.RedfishID)
		}
	}
	if got := strings.Join(names, ","); got != "hgx-hmc,hgx-erot,hgx-gpu-vbios,hgx-nvswitch" {
		t.Errorf("FirmwareFor(hgx) order = %s", got)
	}
	nic := sku.FirmwareFor(ComponentNIC)
	if len(nic) != 1 || nic[0].Gate != GateAtLeast || nic[0].Match.PSID != "MT_0000000838" {
		t.Errorf("nic = %+v", nic)
	}
	if dpu := sku.FirmwareFor(ComponentDPU); len(dpu) != 1 || dpu[0].Version != "BF-24.10-17" {
		t.Errorf("dpu = %+v", dpu)
	}
	s := sku.Spec.BIOS.Settings
	if s["AcPwrRcvryUserDelay"] != int64(60) || s["AcPwrRcvry"] != "On" || s["SriovGlobalEnable"] != "Enabled" {
		t.Errorf("bios settings typed wrong: %#v", s)
	}
	if sku.Spec.Wipe.Policy != WipePSIDRevert || sku.Spec.Wipe.Disks.Transport != TransportNVMe {
		t.Errorf("wipe = %+v", sku.Spec.Wipe)
	}
	if sku.Spec.OS.TargetDisk.MaxSize != 1_000_000_000_000 {
		t.Errorf("targetDisk.maxSize = %d", sku.Spec.OS.TargetDisk.MaxSize)
	}
	if !strings.HasPrefix(sku.Spec.OS.FirstBoot.UserData, "#cloud-config\n") {
		t.Errorf("userData = %q", sku.Spec.OS.FirstBoot.UserData)
	}
}

func TestSuite(t *testing.T) {
	doc, err := LoadFile("testdata/suite.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if doc.Kind != KindValidationSuite || doc.Suite == nil || doc.SKU != nil {
		t.Fatalf("doc = %+v", doc)
	}
	c := doc.Suite.Spec.Checks[0]
	wantParams := map[string]any{
		"precision": "fp16", "matrixSize": int64(8192), "utilisation": 0.95,
		"devices": []any{int64(0), int64(1), 2.5, "all", true},
	}
	if !reflect.DeepEqual(c.Params, wantParams) {
		t.Errorf("params = %#v\nwant %#v", c.Params, wantParams)
	}
	if c.Thresholds["powerW"].Equals != 1000.0 || c.Thresholds["eccUncorrectable"].Equals != int64(0) {
		t.Errorf("equals typed wrong: %#v", c.Thresholds)
	}
	if mx := c.Thresholds["temperatureC"].Max; mx == nil || *mx != 87 {
		t.Errorf("temperatureC.max = %v", mx)
	}
	if c.Duration.String() != "30m0s" || doc.Suite.Spec.Duration.String() != "2h0m0s" || !doc.Suite.Spec.FailFast {
		t.Errorf("durations/failFast = %v %v %v", c.Duration, doc.Suite.Spec.Duration, doc.Suite.Spec.FailFast)
	}
}

func TestKindMismatch(t *testing.T) {
	suite, _ := os.ReadFile("testdata/suite.yaml")
	if _, err := ParseSKU("suite.yaml", suite); err == nil || err.Error() != "suite.yaml:1: kind: expected SKU, found ValidationSuite" {
		t.Errorf("ParseSKU(suite) error = %v", err)
	}
	sku, _ := os.ReadFile("examples/qemu-nvme.yaml")
	if _, err := ParseSuite("sku.yaml", sku); err == nil || err.Error() != "sku.yaml:1: kind: expected ValidationSuite, found SKU" {
		t.Errorf("ParseSuite(sku) error = %v", err)
	}
}

func TestGateDefaultsToEqual(t *testing.T) {
	sku, err := ParseSKU("m.yaml", []byte(`apiVersion: cure.dev/v1
kind: SKU
metadata: {name: m}
spec:
  firmware:
    - {name: a, component: nvme, via: in-band, match: {model: x}, version: "1.0", activation: none}
    - {name: b, component: nvme, via: in-band, match: {model: y}, version: "1.0", gate: "", activation: none}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range sku.Spec.Firmware {
		if f.Gate != GateEqual {
			t.Errorf("%s: gate = %q, want %q", f.Name, f.Gate, GateEqual)
		}
	}
}

func TestAliasesResolve(t *testing.T) {
	sku, err := ParseSKU("m.yaml", []byte(`apiVersion: cure.dev/v1
kind: SKU
metadata: {name: m}
spec:
  firmware:
    - name: gpu
      component: hgx
      via: redfish
      match: {redfishId: "HGX_FW_GPU_*"}
      version: "97.00.82.00.0B"
      artifact: &pkg {sha256: "`+strings.Repeat("0", 64)+`", size: 10, format: fwpkg}
      activation: host-reboot
    - name: nvswitch
      component: hgx
      via: redfish
      match: {redfishId: "HGX_FW_NVSwitch_*"}
      version: "1.0"
      artifact: *pkg
      activation: host-reboot
`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := sku.Spec.Firmware[0].Artifact, sku.Spec.Firmware[1].Artifact
	if b == nil || *a != *b || b.Size != 10 {
		t.Errorf("aliased artifact = %+v, want %+v", b, a)
	}
}

func TestMarshalRefusesInvalid(t *testing.T) {
	sku, err := LoadSKU("examples/qemu-nvme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sku.Spec.Firmware[0].Version = "7..2"
	sku.Spec.OS.Image.SHA256 = ""
	_, err = Marshal(sku)
	if err == nil || !strings.Contains(err.Error(), "spec.firmware[0].version") || !strings.Contains(err.Error(), "spec.os.image.sha256") {
		t.Fatalf("Marshal(invalid) error = %v, want both problems named", err)
	}
	if _, err := Marshal(42); err == nil {
		t.Error("Marshal(42) succeeded")
	}
}

func TestMarshalFillsHeader(t *testing.T) {
	out, err := Marshal(SKU{Metadata: Metadata{Name: "bare"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "apiVersion: cure.dev/v1\nkind: SKU\nmetadata:\n  name: bare\nspec: {}\n"; string(out) != want {
		t.Errorf("Marshal = %q, want %q", out, want)
	}
}

func TestByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ByteSize
		str  string
	}{
		{"512", 512, "512B"},
		{"1GiB", 1 << 30, "1GiB"},
		{"1 gib", 1 << 30, "1GiB"},
		{"8TiB", 8 << 40, "8TiB"},
		{"1.92TB", 1_920_000_000_000, "1920GB"},
		{"2TB", 2e12, "2TB"},
		{"1.5KiB", 1536, "1536B"},
		{"4096B", 4096, "4KiB"},
		{"3000KB", 3e6, "3MB"},
	} {
		got, err := ParseByteSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			continue
		}
		if got.String() != tc.str {
			t.Errorf("ByteSize(%d).String() = %q, want %q", got, got.String(), tc.str)
		}
		if back, err := ParseByteSize(got.String()); err != nil || back != got {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d back", got.String(), back, err, got)
		}
	}
	for _, bad := range []string{"", "GiB", "-1GiB", "0", "1e3", "1.5B", "12 parsecs", "9999999PiB", "0x10"} {
		if n, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) = %d, want an error", bad, n)
		}
	}
}

func TestRenderHostname(t *testing.T) {
	for _, tc := range []struct {
		tmpl, want, err string
	}{
		{"", "node-7", ""},
		{"{{.NodeID}}", "node-7", ""},
		{"gpu-{{ .Serial }}.dc1", "gpu-sn42ab.dc1", ""},
		{"{{.NodeID}}-{{.Serial}}", "node-7-sn42ab", ""},
		{"{{.Hostname}}", "", "placeholder {{.Hostname}} is not allowed"},
		{"{{.NodeID | printf}}", "", "only {{.NodeID}} and {{.Serial}}"},
		{"a_{{.NodeID}}", "", `"_" is not allowed`},
		{"-{{.NodeID}}", "", "not a valid host name"},
		{strings.Repeat("a", 64), "", "not a valid host name"},
	} {
		got, err := FirstBoot{Hostname: tc.tmpl}.RenderHostname("node-7", "SN42AB")
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("RenderHostname(%q) = %q, %v; want %q", tc.tmpl, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("RenderHostname(%q) error = %v, want %q", tc.tmpl, err, tc.err)
		}
	}
	// A node id the template accepts can still render to a bad name at run time.
	if _, err := (FirstBoot{Hostname: "{{.NodeID}}"}).RenderHostname("rack1/slot2", ""); err == nil {
		t.Error("RenderHostname accepted a node id with '/'")
	}
}

// FuzzParse: the loader never panics, and whatever it accepts survives
// Marshal -> Parse unchanged.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"examples/qemu-nvme.yaml", "examples/hgx-b200.yaml", "testdata/suite.yaml", "testdata/bad/firmware.yaml"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := Parse("fuzz.yaml", data)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) == 0 {
				t.Fatalf("error %T %v is not a non-empty *ValidationError", err, err)
			}
			return
		}
		out, err := Marshal(doc)
		if err != nil {
			t.Fatalf("accepted manifest does not marshal: %v", err)
		}
		back, err := Parse("again.yaml", out)
		if err != nil || !reflect.DeepEqual(doc, back) {
			t.Fatalf("round trip failed: %v\n%s", err, out)
		}
	})
}

func TestHardwareSection(t *testing.T) {
	sku, err := LoadSKU("examples/hgx-b200.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h := sku.Spec.Hardware
	if h == nil || h.CPU == nil || h.Memory == nil || h.GPUs == nil || h.NVSwitches == nil {
		t.Fatalf("hardware = %+v", h)
	}
	if h.CPU.Sockets != 2 || h.CPU.Cores != 112 || h.Memory.DIMMs != 32 || h.Memory.DIMMSize != 64<<30 {
		t.Errorf("cpu %+v memory %+v", h.CPU, h.Memory)
	}
	if h.GPUs.Count != 8 || len(h.GPUs.Addresses) != 8 || h.GPUs.Addresses[5] != "0000:c3:00.0" || h.NVSwitches.Count != 2 ||
		h.GPUs.NVLinks != 18 || !h.GPUs.Fabric {
		t.Errorf("gpus %+v nvswitches %+v", h.GPUs, h.NVSwitches)
	}
	if len(h.NICs) != 2 || h.NICs[0].SpeedMbps != 400000 || h.NICs[1].Count != 2 {
		t.Errorf("nics %+v", h.NICs)
	}
	if len(h.NVMe) != 2 || h.NVMe[0].MinSize != 7680000000000 || h.NVMe[1].Model != "Micron_7450_*" {
		t.Errorf("nvme %+v", h.NVMe)
	}
	if h.GPUs.PCIe == nil || *h.GPUs.PCIe != (PCIeSpec{Gen: 5, Width: 16}) || h.NVMe[1].PCIe == nil || *h.NVMe[1].PCIe != (PCIeSpec{Gen: 4, Width: 4}) ||
		h.NICs[0].PCIe == nil || h.NICs[1].PCIe != nil || h.NVSwitches.PCIe != nil {
		t.Errorf("pcie: gpus %+v nvme %+v nics %+v", h.GPUs.PCIe, h.NVMe[1].PCIe, h.NICs)
	}
	// Every part is optional: a SKU with only a NIC group is valid.
	doc := "apiVersion: cure.dev/v1\nkind: SKU\nmetadata: {name: x}\nspec:\n  hardware:\n    nics:\n      - {model: \"*\", speedMbps: 1000}\n"
	s, err := ParseSKU("x.yaml", []byte(doc))
	if err != nil || s.Spec.Hardware.CPU != nil || len(s.Spec.Hardware.NICs) != 1 {
		t.Errorf("nic-only hardware: %v %+v", err, s)
	}
	for _, c := range []struct{ gpus, want string }{
		{"{count: 8, nvlinks: 0}", "spec.hardware.gpus.nvlinks: 0 is out of range"},
		{"{count: 8, nvlinks: 100}", "spec.hardware.gpus.nvlinks: 100 NVLinks per GPU: at most 64"},
		{"{count: 8, fabric: yes please}", "spec.hardware.gpus.fabric: expected true or false"},
	} {
		doc := "apiVersion: cure.dev/v1\nkind: SKU\nmetadata: {name: x}\nspec:\n  hardware:\n    gpus: " + c.gpus + "\n"
		if _, err := ParseSKU("x.yaml", []byte(doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("gpus %s: %v, want %q", c.gpus, err, c.want)
		}
	}
	if _, err := ParseSKU("x.yaml", []byte("apiVersion: cure.dev/v1\nkind: SKU\nmetadata: {name: x}\nspec:\n  hardware: {}\n")); err == nil ||
		!strings.Contains(err.Error(), "x.yaml:5: spec.hardware: is empty") {
		t.Errorf("empty hardware: %v", err)
	}
}

// A redfish entry may select by member fields other than the Id, and a
// vendor's date-suffixed version can be written as the desired version.
func TestRedfishMatcherFields(t *testing.T) {
	sku, err := ParseSKU("m.yaml", []byte(`apiVersion: cure.dev/v1
kind: SKU
metadata: {name: m}
spec:
  firmware:
    - name: idrac
      component: bmc
      via: redfish
      match: {name: "Integrated Dell Remote Access Controller", updateable: true}
      version: "7.00.00.171"
      activation: bmc-reset
    - name: ilo
      component: bmc
      via: redfish
      match: {softwareId: "iLO*", relatedItem: "/redfish/v1/Managers/*"}
      version: "2.55 Oct 01 2021"
      gate: at-least
      activation: bmc-reset
`))
	if err != nil {
		t.Fatal(err)
	}
	m0, m1 := sku.Spec.Firmware[0].Match, sku.Spec.Firmware[1].Match
	if m0.Name != "Integrated Dell Remote Access Controller" || m0.Updateable == nil || !*m0.Updateable || m1.SoftwareID != "iLO*" || m1.RelatedItem != "/redfish/v1/Managers/*" {
		t.Errorf("matchers = %+v, %+v", m0, m1)
	}
	if ok, err := sku.Spec.Firmware[1].Satisfied("2.72 Sep 04 2022"); !ok || err != nil {
		t.Errorf("at-least 2.55 Oct 01 2021 over 2.72 Sep 04 2022 = %v, %v", ok, err)
	}
}

func TestStagedSuite(t *testing.T) {
	doc, err := LoadFile("testdata/staged-suite.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sp := doc.Suite.Spec
	var names, stages []string
	for _, c := range sp.Checks {
		names = append(names, c.Name)
		stages = append(stages, c.Stage)
	}
	if want := []string{"nvme-health-before", "cpu-stress", "disk-read", "nvme-health-after"}; !reflect.DeepEqual(names, want) {
		t.Errorf("checks = %v, want %v", names, want)
	}
	if want := []string{"before", "soak", "soak", "after"}; !reflect.DeepEqual(stages, want) {
		t.Errorf("stages of the checks = %v, want %v", stages, want)
	}
	if len(sp.Stages) != 3 || !reflect.DeepEqual(sp.Stages[1].Checks, []string{"cpu-stress", "disk-read"}) {
		t.Fatalf("stages = %+v", sp.Stages)
	}
	tel := sp.Stages[1].Telemetry
	if tel == nil || tel.Interval.String() != "5s" || tel.BMCInterval.String() != "15s" || *tel.Thresholds["gpuTempMaxC"].Max != 85 {
		t.Errorf("telemetry = %+v", tel)
	}
	if b := sp.Checks[2].Fleet["readMBps"]; b.Below == nil || *b.Below != 3 || b.Above != nil {
		t.Errorf("fleet band = %+v", b)
	}
	if sp.Fleet == nil || sp.Fleet.MinNodes != 3 || sp.Fleet.Window.String() != "168h0m0s" || sp.Resume != ResumeContinue {
		t.Errorf("fleet policy %+v, resume %q", sp.Fleet, sp.Resume)
	}
	// The suite's bound wins over the stages' sum; grace is added to it.
	if sp.Planned() != 3*time.Hour || sp.Deadline() != 3*time.Hour+20*time.Minute {
		t.Errorf("planned %s deadline %s", sp.Planned(), sp.Deadline())
	}
	sp.Duration = 0
	if sp.Planned() != 2*time.Hour {
		t.Errorf("planned without a bound = %s, want the soak stage's 2h", sp.Planned())
	}
	// Written back, it reads the same.
	out, err := yaml.Marshal(doc.Suite)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseSuite("again.yaml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !reflect.DeepEqual(again.Spec.Stages, doc.Suite.Spec.Stages) || len(again.Spec.Checks) != 4 || again.Spec.Checks[2].Stage != "soak" {
		t.Errorf("round trip changed the stages:\n%s", out)
	}
}

func TestPlannedFlatSuite(t *testing.T) {
	sp := ValidationSuiteSpec{Checks: []Check{{Name: "a", Duration: Duration(time.Hour)}, {Name: "b"}, {Name: "c", Duration: Duration(30 * time.Minute)}}}
	if sp.Planned() != 90*time.Minute || sp.Deadline() != 90*time.Minute+time.Duration(DefaultGrace) {
		t.Errorf("planned %s deadline %s", sp.Planned(), sp.Deadline())
	}
}

func TestStagedSuiteErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{`spec: {checks: [{name: a, type: cpu}], stages: [{name: s, checks: [{name: b, type: cpu}]}]}`, "spec.checks: set either checks"},
		{`spec: {stages: [{name: s, checks: [{name: a, type: cpu}]}, {name: s, checks: [{name: b, type: cpu}]}]}`, `duplicate stage name "s"`},
		{`spec: {stages: [{name: s, checks: [{name: a, type: cpu}]}, {name: t, checks: [{name: a, type: cpu}]}]}`, `duplicate check name "a"`},
		{`spec: {stages: [{name: s, duration: 1h, checks: [{name: a, type: cpu, duration: 2h}]}]}`, "longer than its stage's duration 1h0m0s"},
		{`spec: {duration: 1h, stages: [{name: s, duration: 40m, checks: [{name: a, type: cpu}]}, {name: t, duration: 40m, checks: [{name: b, type: cpu}]}]}`, "the stages add up to 1h20m0s"},
		{`spec: {resume: sometimes, checks: [{name: a, type: cpu}]}`, `spec.resume: "sometimes" is not one of continue, restart`},
		{`spec: {end: reboot, checks: [{name: a, type: cpu}]}`, `spec.end: "reboot" is not one of host-os, power-off, stay`},
		{`spec: {checks: [{name: a, type: cpu, fleet: {x: {}}}]}`, "band is empty"},
		{`spec: {checks: [{name: a, type: cpu, fleet: {x: {below: -1}}}]}`, "out of range"},
		{`spec: {fleet: {minNodes: 0}, checks: [{name: a, type: cpu}]}`, "spec.fleet.minNodes: 0 is out of range"},
		{`spec: {stages: [{name: s, telemetry: {interval: fast}, checks: [{name: a, type: cpu}]}]}`, "spec.stages[0].telemetry.interval"},
	} {
		src := "apiVersion: cure.dev/v1\nkind: ValidationSuite\nmetadata: {name: x}\n" + tc.yaml + "\n"
		_, err := ParseSuite("x.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s\nerror = %v, want one containing %q", tc.yaml, err, tc.want)
		}
	}
}

// TestSuiteEnd: spec.end is read, kept through a round trip (flat and
// staged), and a suite without it stays in CURE as before.
func TestSuiteEnd(t *testing.T) {
	for _, body := range []string{
		"spec: {end: %s, checks: [{name: a, type: cpu}]}",
		"spec: {end: %s, stages: [{name: s, checks: [{name: a, type: cpu}]}]}",
	} {
		for _, end := range []string{EndHostOS, EndPowerOff, EndStay} {
			src := "apiVersion: cure.dev/v1\nkind: ValidationSuite\nmetadata: {name: x}\n" + fmt.Sprintf(body, end) + "\n"
			s, err := ParseSuite("x.yaml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			if s.Spec.EndPolicy() != end {
				t.Errorf("%s: end %q", src, s.Spec.EndPolicy())
			}
			out, err := Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseSuite("x.yaml", out)
			if err != nil || back.Spec.End != end {
				t.Errorf("round trip: end %q, %v\n%s", back.Spec.End, err, out)
			}
		}
	}
	s, err := ParseSuite("x.yaml", []byte("apiVersion: cure.dev/v1\nkind: ValidationSuite\nmetadata: {name: x}\nspec: {checks: [{name: a, type: cpu}]}\n"))
	if err != nil || s.Spec.End != "" || s.Spec.EndPolicy() != EndStay {
		t.Errorf("no spec.end: %q %q %v", s.Spec.End, s.Spec.EndPolicy(), err)
	}
}

// TestSuiteTools: the tool-bundle programs a suite needs, once each and
// sorted; a suite of built-in checks needs none.
func TestSuiteTools(t *testing.T) {
	s := &ValidationSuite{Spec: ValidationSuiteSpec{Checks: []Check{
		{Name: "a", Type: CheckNICThroughput}, {Name: "b", Type: CheckCPUThroughput}, {Name: "c", Type: CheckStorageRandom},
		{Name: "d", Type: CheckMemoryBandwidth}, {Name: "e", Type: CheckMemory},
	}}}
	if got := s.Tools(); !reflect.DeepEqual(got, []string{"fio", "iperf3", "stress-ng"}) {
		t.Errorf("tools %v", got)
	}
	doc, err := LoadFile("testdata/suite.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := doc.Suite.Tools(); len(got) != 0 {
		t.Errorf("a GPU suite needs %v", got)
	}
}

func TestMatchString(t *testing.T) {
	yes := true
	for _, tc := range []struct {
		m    Match
		want string
	}{
		{Match{}, "{any}"},
		{Match{VendorID: "0x15b3", PSID: "MT_0000000838", Model: "MCX7*"}, `{vendorId="0x15b3" psid="MT_0000000838" model="MCX7*"}`},
		{Match{Name: "BMC", RelatedItem: "/redfish/v1/Managers/*", Updateable: &yes}, `{name="BMC" relatedItem="/redfish/v1/Managers/*" updateable=true}`},
		{Match{RedfishID: "HGX_FW_GPU_*", SoftwareID: "0x0A"}, `{redfishId="HGX_FW_GPU_*" softwareId="0x0A"}`},
	} {
		if got := tc.m.String(); got != tc.want {
			t.Errorf("%#v.String() = %s, want %s", tc.m, got, tc.want)
		}
	}
}

func TestFirmwareVia(t *testing.T) {
	sku := &SKU{Spec: SKUSpec{Firmware: []Firmware{
		{Name: "a", Component: ComponentNIC, Via: ViaInBand}, {Name: "b", Component: ComponentBMC, Via: ViaRedfish},
		{Name: "c", Component: ComponentNIC, Via: ViaInBand}, {Name: "d", Component: ComponentDPU, Via: ViaRedfish},
	}}}
	var got []string
	for _, f := range sku.FirmwareVia(ComponentNIC, ViaInBand) {
		got = append(got, f.Name)
	}
	if strings.Join(got, ",") != "a,c" || len(sku.FirmwareVia(ComponentNIC, ViaRedfish)) != 0 || len(sku.FirmwareVia(ComponentBMC, ViaRedfish)) != 1 {
		t.Errorf("FirmwareVia = %v", got)
	}
}

// TestSiteCheckSchema: a site check carries its program's pin and what it
// tests, round-trips, and is refused without a program, with a program on
// another type, with a bad pin or a timeout longer than it may run.
func TestSiteCheckSchema(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	src := "apiVersion: cure.dev/v1\nkind: ValidationSuite\nmetadata: {name: x}\nspec:\n  stages:\n  - name: s\n    duration: 10m\n    checks:\n" +
		"    - name: bmc-sel\n      type: site\n      params: {maxEntries: 3}\n" +
		"      program: {sha256: " + sum + ", size: 812, description: the BMC's event log holds no critical entry, timeout: 2m}\n"
	s, err := ParseSuite("x.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	c := s.Spec.Checks[0]
	want := &SiteProgram{SHA256: sum, Size: 812, Description: "the BMC's event log holds no critical entry", Timeout: Duration(2 * time.Minute), Network: SiteNetworkNone}
	if c.Type != CheckSite || !reflect.DeepEqual(c.Program, want) || c.Params["maxEntries"] != int64(3) {
		t.Fatalf("check %+v program %+v", c, c.Program)
	}
	out, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := ParseSuite("x.yaml", out); err != nil || !reflect.DeepEqual(back, s) {
		t.Fatalf("round trip: %v\n%s", err, out)
	}
	prog := func(p string) string { return "spec: {checks: [{name: a, type: site, program: {" + p + "}}]}" }
	for _, tc := range []struct{ yaml, want string }{
		{`spec: {checks: [{name: a, type: site}]}`, "spec.checks[0].program: required field is missing"},
		{`spec: {checks: [{name: a, type: cpu, program: {sha256: ` + sum + `, size: 1, description: d}}]}`, "only a site check runs a program (this check is type cpu)"},
		{prog("sha256: ABC, size: 1, description: d"), `program.sha256: "ABC" is not a sha256`},
		{prog("sha256: " + sum + ", description: d"), "program.size: required field is missing"},
		{prog("sha256: " + sum + ", size: 0, description: d"), "program.size: 0 bytes is out of range"},
		{prog("sha256: " + sum + ", size: 1"), "program.description: required field is missing"},
		{prog("sha256: " + sum + ", size: 1, description: d, url: ftp://x/y"), "must be an absolute http:// or https:// URL"},
		{prog("sha256: " + sum + ", size: 1, description: d, runAs: root"), "program.runAs: unknown field"},
		{prog("sha256: " + sum + ", size: 1, description: d, network: host"), `program.network: "host" is not a site program's network (want none, the default, or node)`},
		{`spec: {checks: [{name: a, type: site, duration: 1m, program: {sha256: ` + sum + `, size: 1, description: d, timeout: 2m}}]}`,
			"program.timeout: 2m0s is longer than the check's duration 1m0s"},
		{`spec: {stages: [{name: s, duration: 1m, checks: [{name: a, type: site, program: {sha256: ` + sum + `, size: 1, description: d, timeout: 2m}}]}]}`,
			"program.timeout: 2m0s is longer than its stage's duration 1m0s"},
	} {
		src := "apiVersion: cure.dev/v1\nkind: ValidationSuite\nmetadata: {name: x}\n" + tc.yaml + "\n"
		_, err := ParseSuite("x.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s\nerror = %v, want one containing %q", tc.yaml, err, tc.want)
		}
	}
}

// TestCheckOptional: optional: {reason: ...} is read and kept through a
// round trip; optional without a reason is refused naming file, line and
// field (a check may test nothing only where the suite says why).
func TestCheckOptional(t *testing.T) {
	head := "apiVersion: cure.dev/v1\nkind: ValidationSuite\nmetadata: {name: x}\nspec:\n  checks:\n"
	s, err := ParseSuite("x.yaml", []byte(head+"  - {name: ib, type: infiniband, optional: {reason: \"QEMU nodes have no InfiniBand\"}}\n  - {name: cpu, type: cpu}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Spec.Checks[0].OptionalReason(); got != "QEMU nodes have no InfiniBand" {
		t.Errorf("reason %q", got)
	}
	if s.Spec.Checks[1].Optional != nil || s.Spec.Checks[1].OptionalReason() != "" {
		t.Errorf("a check without optional is optional: %+v", s.Spec.Checks[1].Optional)
	}
	out, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseSuite("x.yaml", out)
	if err != nil || !reflect.DeepEqual(back.Spec.Checks, s.Spec.Checks) {
		t.Errorf("round trip: %v\n%s", err, out)
	}
	for _, tc := range []struct{ check, want string }{
		{`optional: true`, `x.yaml:6: spec.checks[0].optional: expected {reason: "why this check may test nothing here"}, found boolean true`},
		{`optional: "no IB"`, `x.yaml:6: spec.checks[0].optional: expected {reason:`},
		{`optional: ~`, `x.yaml:6: spec.checks[0].optional: expected {reason:`},
		{`optional: {}`, `x.yaml:6: spec.checks[0].optional.reason: required field is missing: an optional check must say why`},
		{`optional: {reason: ""}`, `x.yaml:6: spec.checks[0].optional.reason: must not be empty`},
		{`optional: {reason: [a]}`, `x.yaml:6: spec.checks[0].optional.reason: expected a string, found a list`},
		{`optional: {reason: x, why: y}`, `x.yaml:6: spec.checks[0].optional.why: unknown field (known fields: reason)`},
	} {
		_, err := ParseSuite("x.yaml", []byte(head+"  - {name: ib, type: infiniband, "+tc.check+"}\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error = %v, want one containing %q", tc.check, err, tc.want)
		}
	}
}
