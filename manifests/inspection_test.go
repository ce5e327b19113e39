package manifests

import (
	"strings"
	"testing"
)

func inspectionSKU(t *testing.T, name, rule string) *SKU {
	t.Helper()
	s, err := ParseSKU(name+".yaml", []byte("apiVersion: cure.dev/v1\nkind: SKU\nmetadata:\n  name: "+name+"\nspec:\n  inspection:\n"+rule))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s
}

// Inspection rules propose the most specific matching SKU and fill the
// name template; a machine no rule matches gets no proposal; a bad rule is
// refused with its file, line and field.
func TestInspectionRulesProposeSKU(t *testing.T) {
	skus := []*SKU{
		inspectionSKU(t, "hgx-b200", "    match:\n      cpuModel: 'Xeon.*8570'\n      gpuModel: B200\n      gpuCount: 8\n      nicVendors: ['0x15b3']\n    name: 'hgx-{serial}'\n"),
		inspectionSKU(t, "cpu-only", "    match:\n      cpuModel: Xeon\n"),
		inspectionSKU(t, "qemu-nvme", "    match:\n      serial: '^QEMU'\n      nicVendors: ['0x1af4']\n    name: 'vm-{mac}'\n"),
		inspectionSKU(t, "a-also-qemu", "    match:\n      serial: '^QEMU-'\n      nicVendors: ['0x1AF4']\n"),
		{Metadata: Metadata{Name: "no-rule"}},
	}
	b200 := make([]string, 8)
	for i := range b200 {
		b200[i] = "NVIDIA B200"
	}
	for _, c := range []struct {
		name      string
		facts     Facts
		sku, node string
	}{
		{"every condition of the specific rule", Facts{CPUModels: []string{"Intel Xeon Platinum 8570", "Intel Xeon Platinum 8570"}, GPUModels: b200,
			NICVendors: []uint32{0x8086, 0x15b3}, Serial: "SN 1234/A", MAC: "aa:bb:cc:dd:ee:ff"}, "hgx-b200", "hgx-sn-1234-a"},
		{"seven GPUs: only the CPU rule", Facts{CPUModels: []string{"Intel Xeon Platinum 8570"}, GPUModels: b200[:7],
			NICVendors: []uint32{0x15b3}, Serial: "X1"}, "cpu-only", "cpu-only-x1"},
		{"no Mellanox NIC", Facts{CPUModels: []string{"Intel Xeon Platinum 8570"}, GPUModels: b200, NICVendors: []uint32{0x8086}, Serial: "X2"}, "cpu-only", "cpu-only-x2"},
		{"tie on conditions: the name that sorts first", Facts{CPUModels: []string{"QEMU Virtual CPU"}, NICVendors: []uint32{0x1af4},
			Serial: "QEMU-7", MAC: "52:54:00:12:34:56"}, "a-also-qemu", "a-also-qemu-qemu-7"},
		{"one rule", Facts{CPUModels: []string{"QEMU Virtual CPU"}, NICVendors: []uint32{0x1af4}, Serial: "QEMU7", MAC: "52:54:00:12:34:56"}, "qemu-nvme", "vm-525400123456"},
		{"no processors: a CPU rule does not match", Facts{NICVendors: []uint32{0x8086}, Serial: "Z"}, "", ""},
		{"an arm64 machine: no amd64 SKU", Facts{CPUModels: []string{"Xeon"}, Serial: "A", Arch: "arm64"}, "", ""},
		{"an amd64 machine", Facts{CPUModels: []string{"Xeon"}, Serial: "A", Arch: "amd64"}, "cpu-only", "cpu-only-a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, ok := Propose(skus, c.facts)
			if ok != (c.sku != "") || p.SKU != c.sku || p.Name != c.node {
				t.Fatalf("Propose = %+v, %t; want sku %q name %q", p, ok, c.sku, c.node)
			}
		})
	}
	for _, c := range []struct{ rule, want string }{
		{"    match: {}\n", "x.yaml:7: spec.inspection.match: no condition"},
		{"    name: x\n", "spec.inspection.match: required field is missing"},
		{"    match:\n      cpuModel: '('\n", "x.yaml:8: spec.inspection.match.cpuModel: \"(\" is not a regular expression"},
		{"    match:\n      nicVendors: [15b3]\n", "x.yaml:8: spec.inspection.match.nicVendors[0]: \"15b3\" is not a PCI vendor id"},
		{"    match:\n      gpuCount: 0\n", "spec.inspection.match.gpuCount: 0 is out of range"},
		{"    match:\n      gpus: 8\n", "x.yaml:8: spec.inspection.match.gpus: unknown field"},
		{"    match: {serial: a}\n    name: '{host}'\n", "spec.inspection.name: unknown placeholder {host}"},
	} {
		_, err := ParseSKU("x.yaml", []byte("apiVersion: cure.dev/v1\nkind: SKU\nmetadata:\n  name: x\nspec:\n  inspection:\n"+c.rule))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("rule %q: error %v, want %q", c.rule, err, c.want)
		}
	}
}
