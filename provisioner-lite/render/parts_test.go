package render

import (
	"bytes"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"golang.org/x/net/html"
)

func partsReport() *curev1.RunReport {
	msg := curev1.AppendEvidence("0000:01:00.0 link 2.5 GT/s x1, capable 2.5 GT/s x1; SKU wants gen4 x4",
		"kernel log (last 2 of 2 lines naming nvme0)", []string{
			"[    0.901242] pci 0000:01:00.0: [1b36:0010] type 00 class 0x010802",
			`[    9.000000] nvme nvme0: <script>alert("x")</script>`})
	return &curev1.RunReport{RunId: "r7", NodeId: "node1", Mode: curev1.Mode_MODE_DIAGNOSTIC, Status: "failed",
		Verdicts: []*curev1.Verdict{{Component: "nvme/0", Check: "hardware", Status: curev1.VerdictStatus_FAIL, Observed: "2.5 GT/s x1", Expected: "gen4 x4", Message: msg}},
		Parts: []*curev1.RmaPart{{Component: "nvme/0", Kind: "nvme", Model: "QEMU NVMe Ctrl", Serial: "CURE-QEMU-0001", Firmware: "7.2.22",
			Location: "nvme0 at PCI 0000:01:00.0", Link: "2.5 GT/s x1 of 2.5 GT/s x1 (port 0000:00:03.0: 2.5 GT/s x1)",
			Status: curev1.VerdictStatus_FAIL, Checks: []string{"hardware"},
			KernelLog: []string{"[    0.901242] pci 0000:01:00.0: [1b36:0010] type 00 class 0x010802", `[    9.000000] nvme nvme0: <script>alert("x")</script>`},
			Evidence:  []string{"machine checks:", "CPU 0 bank 9"}}},
	}
}

// The text report lists each part with its identity and the kernel lines
// under it; the verdict table keeps the verdict's own text only.
func TestPrintReportParts(t *testing.T) {
	var b bytes.Buffer
	PrintReportWide(&b, partsReport())
	out := b.String()
	for _, want := range []string{"PARTS NAMED BY FAILING VERDICTS",
		"nvme/0  FAIL  QEMU NVMe Ctrl, serial CURE-QEMU-0001, firmware 7.2.22, nvme0 at PCI 0000:01:00.0, link 2.5 GT/s x1 of 2.5 GT/s x1 (port 0000:00:03.0: 2.5 GT/s x1)",
		"  checks: hardware", "  kernel log:\n    [    0.901242] pci 0000:01:00.0", "  CPU 0 bank 9"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	table := out[:strings.Index(out, "PARTS")]
	if strings.Contains(table, "--- kernel log") || strings.Count(out, "type 00 class") != 1 {
		t.Errorf("the evidence block leaked into the verdict table:\n%s", out)
	}
}

// The HTML report has a part section with the identity and the kernel
// lines as escaped preformatted text.
func TestWriteHTMLParts(t *testing.T) {
	var b bytes.Buffer
	if err := writeHTML(&b, partsReport(), nil, time.UnixMilli(t0)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	doc, err := html.Parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	parts := find(doc, func(n *html.Node) bool { return attr(n, "id") == "parts" })
	if parts == nil {
		t.Fatalf("no parts section:\n%s", out)
	}
	txt := text(parts)
	for _, want := range []string{"nvme/0", "FAIL", "serial CURE-QEMU-0001", "link 2.5 GT/s x1 of 2.5 GT/s x1", "checks: hardware",
		"pci 0000:01:00.0: [1b36:0010]", `<script>alert("x")</script>`} {
		if !strings.Contains(txt, want) {
			t.Errorf("parts section lacks %q: %s", want, txt)
		}
	}
	if strings.Contains(strings.ToLower(out), "<script>") {
		t.Error("a kernel line's markup was not escaped")
	}
	rows := tableRows(t, doc, "verdicts")
	if len(rows) != 1 || strings.Contains(rows[0][5], "kernel log") {
		t.Errorf("verdict rows %q", rows)
	}
}

// PCI ids, classes and machine-check registers read as lspci and the
// kernel write them.
func TestInventoryHexFields(t *testing.T) {
	var b bytes.Buffer
	PrintInventory(&b, &curev1.InventoryRecord{Inventory: &curev1.Inventory{
		PcieLinks:     []*curev1.PcieLink{{Address: "0000:01:00.0", VendorId: 0x1b36, DeviceId: 0x10, Class: 0x010802, SpeedGts: 2.5, Width: 1}},
		MachineChecks: []*curev1.MachineCheck{{Cpu: 1, Bank: 9, Status: 0x9c0000000000009f, Address: 0x1000, Dimm: "DIMM 0"}},
	}}, "r1")
	out := b.String()
	for _, want := range []string{"PCIe links (1)", "SPEED GT/S", "1b36", "0010", "0x010802", "0x9c0000000000009f", "0x1000"} {
		if !strings.Contains(out, want) {
			t.Errorf("inventory lacks %q:\n%s", want, out)
		}
	}
}
