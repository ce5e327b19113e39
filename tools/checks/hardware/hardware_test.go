package hardware

import (
	"fmt"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/checks"
	"google.golang.org/protobuf/proto"
)

const skuYAML = `apiVersion: cure.dev/v1
kind: SKU
metadata: {name: hgx-test}
spec:
  hardware:
    cpu: {model: "INTEL(R) XEON(R) PLATINUM 8570*", sockets: 2, cores: 112}
    memory: {dimms: 4, dimmSize: 64GiB}
    gpus:
      count: 8
      pciId: "10de:2901"
      addresses: ["0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0",
                  "0000:9d:00.0", "0000:c3:00.0", "0000:c1:00.0", "0000:df:00.0"]
    nvswitches: {count: 2}
    nics:
      - {model: "*ConnectX-7*", count: 2, speedMbps: 400000}
    nvme:
      - {model: "SAMSUNG MZWLO*", count: 2, minSize: 7.68TB}
`

func sku(t *testing.T) *manifests.Hardware {
	t.Helper()
	s, err := manifests.ParseSKU("hgx-test.yaml", []byte(skuYAML))
	if err != nil {
		t.Fatal(err)
	}
	return s.Spec.Hardware
}

// node is an inventory that matches skuYAML exactly.
func node() *curev1.Inventory {
	inv := &curev1.Inventory{}
	for i := range 2 {
		inv.Processors = append(inv.Processors, &curev1.Processor{Id: uint32(i), Model: "INTEL(R) XEON(R) PLATINUM 8570", Cores: 56, Threads: 112})
	}
	for _, loc := range []string{"A1", "A2", "B3", "B4"} {
		inv.Dimms = append(inv.Dimms, &curev1.Dimm{Locator: loc, SizeBytes: 64 << 30, Serial: "S-" + loc})
	}
	for i, a := range []string{"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0", "0000:9d:00.0", "0000:c3:00.0", "0000:c1:00.0", "0000:df:00.0"} {
		inv.Gpus = append(inv.Gpus, &curev1.Gpu{Index: uint32(i), PciAddress: a, PciDeviceId: 0x2901})
	}
	inv.Nvswitches = []*curev1.PciDevice{{Address: "0000:05:00.0"}, {Address: "0000:06:00.0"}}
	// ens1f0/ens2f0 are the ConnectX-7 ports; eno1 (the boot NIC, an
	// Intel) sorts first on the bus and is no group's.
	inv.Nics = []*curev1.NetInterface{
		{Name: "ens2f0", PciAddress: "0000:3a:00.0", Model: "MT2910 Family [ConnectX-7]", PciVendorId: 0x15b3, PciDeviceId: 0x1021, SpeedMbps: 400000, LinkUp: true},
		{Name: "eno1", PciAddress: "0000:02:00.0", Model: "Ethernet Controller X710", PciVendorId: 0x8086, PciDeviceId: 0x1572, SpeedMbps: 10000, LinkUp: true},
		{Name: "ens1f0", PciAddress: "0000:29:00.0", Model: "MT2910 Family [ConnectX-7]", PciVendorId: 0x15b3, PciDeviceId: 0x1021, SpeedMbps: 400000, LinkUp: true},
		{Name: "bond0"}, // virtual: no PCI address
	}
	for i := range 2 {
		n := fmt.Sprintf("nvme%d", i)
		inv.Nvme = append(inv.Nvme, &curev1.NvmeController{Name: n, Model: "SAMSUNG MZWLO7T6HBLA-00A07", Serial: "SN" + n, Namespaces: []string{n + "n1"}})
		inv.Disks = append(inv.Disks, &curev1.BlockDevice{Name: n + "n1", SizeBytes: 7681501126656})
	}
	return inv
}

func failures(vs []checks.Verdict) []string {
	var out []string
	for _, v := range Failures(vs) {
		out = append(out, fmt.Sprintf("%s %s %s", v.Component, v.Status, v.Message))
	}
	return out
}

// TestInventoryAgainstSKU: a missing GPU, an absent DIMM and a NIC at the
// wrong link speed are each named; a matching node passes.
func TestInventoryAgainstSKU(t *testing.T) {
	h := sku(t)
	vs := Compare(node(), h)
	if f := failures(vs); len(f) != 0 {
		t.Fatalf("matching node: failures %q", f)
	}
	comps := map[string]bool{}
	for _, v := range vs {
		if v.Status != checks.Pass || v.Check != Check {
			t.Errorf("matching node: %v", v)
		}
		comps[v.Component] = true
	}
	for _, c := range []string{"cpu", "memory", "gpus", "nvswitch", "nic", "nvme"} {
		if !comps[c] {
			t.Errorf("matching node: no PASS for %s in %v", c, vs)
		}
	}

	inv := node()
	inv.Gpus = append(inv.Gpus[:6], inv.Gpus[7:]...) // 0000:c1:00.0 fell off the bus
	inv.Dimms[2].SizeBytes, inv.Dimms[2].Serial = 0, ""
	inv.Nics[2].SpeedMbps = 200000 // ens1f0: the first ConnectX-7 on the bus
	got := failures(Compare(inv, h))
	want := []string{
		"dimm/B3 FAIL absent",
		"memory FAIL 3 DIMMs populated, want 4 (4 slots listed by SMBIOS)",
		"gpu/6 FAIL missing at PCI 0000:c1:00.0",
		"gpus FAIL count 7, want 8",
		"nic/1 FAIL link 200000 Mb/s, want 400000 on ens1f0 (PCI 0000:29:00.0)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("failures:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestEachPart(t *testing.T) {
	h := sku(t)
	for _, tc := range []struct {
		name   string
		change func(*curev1.Inventory)
		want   []string
	}{
		{"one socket", func(inv *curev1.Inventory) { inv.Processors = inv.Processors[:1] },
			[]string{"cpu FAIL 1 sockets, want 2", "cpu FAIL 56 cores, want 112"}},
		{"other cpu model", func(inv *curev1.Inventory) { inv.Processors[1].Model = "AMD EPYC 9654" },
			[]string{`cpu/1 FAIL model "AMD EPYC 9654", want "INTEL(R) XEON(R) PLATINUM 8570*"`}},
		{"small dimm", func(inv *curev1.Inventory) { inv.Dimms[0].SizeBytes = 32 << 30 },
			[]string{"dimm/A1 FAIL size 32 GiB, want 64 GiB"}},
		{"extra dimm", func(inv *curev1.Inventory) {
			inv.Dimms = append(inv.Dimms, &curev1.Dimm{Locator: "C1", SizeBytes: 64 << 30})
		}, []string{"memory FAIL 5 DIMMs populated, want 4 (5 slots listed by SMBIOS)"}},
		{"no smbios", func(inv *curev1.Inventory) { inv.Dimms = nil },
			[]string{"memory FAIL 0 DIMMs populated, want 4 (0 slots listed by SMBIOS)"}},
		{"unexpected gpu", func(inv *curev1.Inventory) {
			inv.Gpus[7].PciAddress = "0000:e0:00.0"
		}, []string{"gpu/7 FAIL missing at PCI 0000:df:00.0", "gpu/0000:e0:00.0 FAIL unexpected GPU at PCI 0000:e0:00.0: 10de:2901"}},
		{"wrong gpu", func(inv *curev1.Inventory) {
			inv.Gpus[3].PciDeviceId, inv.Gpus[3].Name = 0x2330, "GH100[H100 SXM5 80GB]"
		},
			[]string{`gpu/3 FAIL GH100[H100 SXM5 80GB] (10de:2330) at PCI 0000:61:00.0, want 10de:2901`}},
		{"nvswitch gone", func(inv *curev1.Inventory) { inv.Nvswitches = inv.Nvswitches[:1] },
			[]string{"nvswitch FAIL count 1, want 2"}},
		{"nic missing and link down", func(inv *curev1.Inventory) {
			inv.Nics = inv.Nics[1:]
			inv.Nics[1].SpeedMbps, inv.Nics[1].LinkUp = 0, false
		}, []string{`nic FAIL 1 ports match "*ConnectX-7*", want 2`, "nic/1 FAIL link down on ens1f0 (PCI 0000:29:00.0), want 400000 Mb/s"}},
		{"small drive", func(inv *curev1.Inventory) { inv.Disks[1].SizeBytes = 3840755982336 },
			[]string{"nvme/1 FAIL size 3.84 TB, want at least 7.68 TB (nvme1, serial SNnvme1)"}},
		{"drive of another model", func(inv *curev1.Inventory) { inv.Nvme[0].Model = "Micron_7450_MTFDKBA960TFR" },
			[]string{`nvme FAIL 1 drives match "SAMSUNG MZWLO*", want 2`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := node()
			tc.change(inv)
			if got := failures(Compare(inv, h)); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("failures:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// Named slots: each declared locator must be populated.
func TestDeclaredLocators(t *testing.T) {
	h := &manifests.Hardware{Memory: &manifests.MemorySpec{DIMMs: 4, Locators: []string{"A1", "B3", "Z9"}}}
	inv := node()
	inv.Dimms[2].SizeBytes = 0
	got := failures(Compare(inv, h))
	want := []string{"dimm/B3 FAIL absent", `dimm/Z9 FAIL absent: SMBIOS lists no slot "Z9"`, "memory FAIL 3 DIMMs populated, want 4 (4 slots listed by SMBIOS)"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("failures:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestNilAndEmpty(t *testing.T) {
	if vs := Compare(node(), nil); vs != nil {
		t.Errorf("no hardware section: %v", vs)
	}
	// An empty inventory (collection failed) fails every declared part.
	vs := Compare(nil, sku(t))
	if len(Failures(vs)) == 0 || len(Failures(vs)) != len(vs) {
		t.Errorf("empty inventory: %v", vs)
	}
	// Compare does not change its input.
	inv := node()
	before := proto.Clone(inv)
	Compare(inv, sku(t))
	if !proto.Equal(before, inv) {
		t.Error("Compare modified the inventory")
	}
}

// A NIC group by PCI id alone, and by model and id together.
func TestNICByPCIID(t *testing.T) {
	for _, g := range []manifests.NICSpec{{PCIID: "15b3:1021", Count: 2}, {Model: "*ConnectX-7*", PCIID: "15b3:1021", Count: 2}} {
		if f := failures(Compare(node(), &manifests.Hardware{NICs: []manifests.NICSpec{g}})); len(f) != 0 {
			t.Errorf("%+v: %q", g, f)
		}
	}
	g := manifests.NICSpec{Model: "*ConnectX-7*", PCIID: "15b3:101d", Count: 2} // CX-6 Dx id
	if f := failures(Compare(node(), &manifests.Hardware{NICs: []manifests.NICSpec{g}})); len(f) != 1 || f[0] != `nic FAIL 0 ports match "*ConnectX-7*" 15b3:101d, want 2` {
		t.Errorf("%q", f)
	}
}

func TestSizes(t *testing.T) {
	for n, want := range map[uint64]string{7681501126656: "7.68 TB", 960197124096: "960.2 GB", 1e12: "1 TB", 512: "512 B"} {
		if got := decimal(n); got != want {
			t.Errorf("decimal(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[uint64]string{64 << 30: "64 GiB", 1536 << 20: "1536 MiB"} {
		if got := binary(n); got != want {
			t.Errorf("binary(%d) = %q, want %q", n, got, want)
		}
	}
}
