package rmaparts

import (
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

func inv() *curev1.Inventory {
	return &curev1.Inventory{
		Nvme:  []*curev1.NvmeController{{Name: "nvme0", Model: "QEMU NVMe Ctrl", Serial: "CURE-QEMU-0001", Firmware: "7.2.22", PciAddress: "0000:01:00.0", Namespaces: []string{"nvme0n1"}}},
		Disks: []*curev1.BlockDevice{{Name: "nvme0n1", Model: "QEMU NVMe Ctrl", Serial: "CURE-QEMU-0001"}},
		Dimms: []*curev1.Dimm{{Locator: "DIMM 0", Bank: "BANK", SizeBytes: 1 << 30, Type: "DDR5", Manufacturer: "QEMU", Serial: "S0001", PartNumber: "CURE-QEMU-DIMM"}},
		Gpus:  []*curev1.Gpu{{Name: "GH100 [H200 SXM 141GB]", PciAddress: "0000:1b:00.0"}},
		Nics:  []*curev1.NetInterface{{Name: "eth0", Mac: "52:54:00:c0:de:01", PciAddress: "0000:00:02.0", Model: "Virtio network device"}},
		PcieLinks: []*curev1.PcieLink{
			{Address: "0000:01:00.0", SpeedGts: 2.5, Width: 1, MaxSpeedGts: 2.5, MaxWidth: 1, Port: "0000:00:03.0", PortMaxSpeedGts: 2.5, PortMaxWidth: 1},
			{Address: "0000:1b:00.0", SpeedGts: 32, Width: 16, MaxSpeedGts: 32, MaxWidth: 16},
		},
		Processors: []*curev1.Processor{{Id: 0, Model: "QEMU TCG CPU"}},
	}
}

func TestParts(t *testing.T) {
	vs := []*curev1.Verdict{
		{Component: "nvme/0", Check: "hardware", Status: curev1.VerdictStatus_FAIL,
			Message: curev1.AppendEvidence("0000:01:00.0 link 2.5 GT/s x1", "kernel log (last 1 of 1 lines naming nvme0)", []string{"[    1.0] nvme nvme0: pci function 0000:01:00.0"})},
		{Component: "nvme/0", Check: "nvme-health", Status: curev1.VerdictStatus_ERROR},
		{Component: "nvme", Check: "hardware", Status: curev1.VerdictStatus_PASS},
		{Component: "dimm/DIMM 0", Check: "hardware_errors", Status: curev1.VerdictStatus_FAIL,
			Message: curev1.AppendEvidence(curev1.AppendEvidence("1 machine check", curev1.EvidenceIdentity, []string{"slot: DIMM 0", "serial: S0001"}),
				"kernel log (last 3 of 3 hardware-error lines)", []string{"[    5.7] mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 9: 9c0000000000009f"})},
		{Component: "gpu/0", Check: "gpu-health", Status: curev1.VerdictStatus_FAIL,
			Message: curev1.AppendEvidence("ecc FAIL", curev1.EvidenceIdentity, []string{"serial: 1654024085493", "uuid: GPU-476c6bd9-bacc-d199-245c-8658bfe3126e",
				"vbios: 96.00.A5.00.1A", "board part number: 692-2G520-0282-000"})},
		{Component: "nic/0", Check: "ethernet-links", Status: curev1.VerdictStatus_MARGINAL},
		{Component: "cpu/0", Check: "cpu-stress", Status: curev1.VerdictStatus_SKIP},
		{Component: "nvme/0", Check: "firmware", Status: curev1.VerdictStatus_DRIFT},
	}
	ps := Parts(inv(), vs)
	var comps []string
	for _, p := range ps {
		comps = append(comps, p.Component)
	}
	if strings.Join(comps, ",") != "dimm/DIMM 0,gpu/0,nic/0,nvme/0" {
		t.Fatalf("parts %v", comps)
	}
	d, g, n, nv := ps[0], ps[1], ps[2], ps[3]
	if nv.Kind != "nvme" || nv.Model != "QEMU NVMe Ctrl" || nv.Serial != "CURE-QEMU-0001" || nv.Firmware != "7.2.22" || nv.Location != "nvme0 at PCI 0000:01:00.0" ||
		nv.Link != "2.5 GT/s x1 of 2.5 GT/s x1 (port 0000:00:03.0: 2.5 GT/s x1)" || nv.Status != curev1.VerdictStatus_FAIL ||
		strings.Join(nv.Checks, ",") != "hardware,nvme-health" || len(nv.KernelLog) != 1 {
		t.Errorf("nvme part %v", nv)
	}
	if d.Kind != "dimm" || d.Serial != "S0001" || d.PartNumber != "CURE-QEMU-DIMM" || d.Location != "slot DIMM 0 (bank BANK)" || d.Model != "QEMU DDR5 1 GiB" ||
		len(d.KernelLog) != 1 || !strings.Contains(d.KernelLog[0], "Bank 9") {
		t.Errorf("dimm part %v", d)
	}
	if g.Serial != "1654024085493" || g.Uuid != "GPU-476c6bd9-bacc-d199-245c-8658bfe3126e" || g.Firmware != "96.00.A5.00.1A" ||
		g.PartNumber != "692-2G520-0282-000" || g.Location != "PCI 0000:1b:00.0" || g.Link != "32 GT/s x16 of 32 GT/s x16" {
		t.Errorf("gpu part %v", g)
	}
	if n.Status != curev1.VerdictStatus_MARGINAL || n.Serial != "52:54:00:c0:de:01" || n.Location != "PCI 0000:00:02.0" {
		t.Errorf("nic part %v", n)
	}
	if ps := Parts(nil, nil); len(ps) != 0 {
		t.Errorf("no verdicts: %v", ps)
	}
}

func TestGPUIdentities(t *testing.T) {
	i := inv()
	i.Gpus = append(i.Gpus, &curev1.Gpu{PciAddress: "0000:43:00.0"})
	vs := []*curev1.Verdict{{Component: "gpu/1", Check: "gpu-health", Status: curev1.VerdictStatus_PASS,
		Message: curev1.AppendEvidence("passed: ecc", curev1.EvidenceIdentity, []string{"serial: 1654024085493",
			"uuid: GPU-476c6bd9-bacc-d199-245c-8658bfe3126e", "vbios: 96.00.A5.00.1A", "board part number: 692-2G520-0282-000",
			"pci: 0000:43:00.0", "memory temp peak: 47 C"})}}
	GPUIdentities(i, vs)
	g := i.Gpus[1]
	if g.Serial != "1654024085493" || g.Uuid != "GPU-476c6bd9-bacc-d199-245c-8658bfe3126e" || g.Vbios != "96.00.A5.00.1A" ||
		g.BoardPartNumber != "692-2G520-0282-000" || g.IdentitySource != "nvml" || g.MemoryTempC != 47 {
		t.Errorf("gpu %v", g)
	}
	if i.Gpus[0].IdentitySource != "" {
		t.Errorf("another GPU changed: %v", i.Gpus[0])
	}
	GPUIdentities(nil, vs) // no inventory: nothing to fill
}
