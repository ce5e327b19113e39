package render

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"golang.org/x/net/html"
	"google.golang.org/protobuf/proto"
)

func sampleInventory() *curev1.InventoryRecord {
	inv := &curev1.Inventory{
		System:      &curev1.SystemInfo{Vendor: "Supermicro", Product: "SYS-821GE-TNHR", Serial: "S4X9213", BiosVersion: "2.1"},
		MemoryBytes: 2 << 40, CpuCount: 224, CpuModel: "Xeon 8480+",
		Nics: []*curev1.NetInterface{{Name: "ens1", Mac: "b8:3f:d2:00:00:01", SpeedMbps: 400000, LinkUp: true, Firmware: "28.39.1002"},
			{Name: "eno1", Mac: "b8:3f:d2:00:00:02", SpeedMbps: 100}},
		Nvme: []*curev1.NvmeController{{Name: "nvme0", Model: "SAMSUNG MZTL63T8", Serial: "S6E0001", Firmware: "GDC7402Q", Namespaces: []string{"nvme0n1", "nvme0n2"}}},
	}
	for i := range 2 {
		inv.Gpus = append(inv.Gpus, &curev1.Gpu{Index: uint32(i), Name: "NVIDIA H100", Serial: fmt.Sprintf("16532200%02d", i), Vbios: "96.00.99"})
	}
	return &curev1.InventoryRecord{RunId: "run-42", BootId: "b-1", Peer: "10.0.0.5", TimeUnixMs: t0, Inventory: inv}
}

func TestInventorySections(t *testing.T) {
	secs := InventorySections(sampleInventory().GetInventory())
	byTitle := map[string]InventorySection{}
	var titles []string
	for _, s := range secs {
		byTitle[s.Title] = s
		titles = append(titles, s.Title)
	}
	// Contract order, the scalar totals first.
	if got := strings.Join(titles, "|"); got != "summary|system|NVMe (1)|NICs (2)|GPUs (2)" {
		t.Fatalf("sections %q", got)
	}
	if got := fmt.Sprint(byTitle["summary"].Pairs); got != "[[memory bytes 2.0 TiB] [CPU count 224] [CPU model Xeon 8480+]]" {
		t.Errorf("summary %s", got)
	}
	if got := fmt.Sprint(byTitle["system"].Pairs); got != "[[vendor Supermicro] [product SYS-821GE-TNHR] [serial S4X9213] [BIOS version 2.1]]" {
		t.Errorf("system %s", got)
	}
	nics := byTitle["NICs (2)"]
	if got := strings.Join(nics.Columns, "|"); got != "name|MAC|speed Mb/s|link up|firmware" {
		t.Errorf("NIC columns %q", got)
	}
	if got := fmt.Sprint(nics.Rows); got != "[[ens1 b8:3f:d2:00:00:01 400 Gb/s yes 28.39.1002] [eno1 b8:3f:d2:00:00:02 100 Mb/s no ]]" {
		t.Errorf("NIC rows %s", got)
	}
	if got := fmt.Sprint(byTitle["NVMe (1)"].Rows); !strings.Contains(got, "nvme0n1, nvme0n2") {
		t.Errorf("NVMe rows %s", got)
	}
}

// The layout follows the message, not a list of known fields: a message it
// was not written for (a Hello, with identity, inventory and state) comes
// out whole, so fields added to Inventory later show without a change.
// PCI ids read as lspci and pci.ids write them: 1af4:1000, not 6900 4096.
func TestPCIIDsInHex(t *testing.T) {
	secs := InventorySections(&curev1.Inventory{Nics: []*curev1.NetInterface{{Name: "eth0", PciVendorId: 0x1af4, PciDeviceId: 0x1000}}})
	if len(secs) != 1 || fmt.Sprint(secs[0].Rows) != "[[eth0 1af4 1000]]" {
		t.Errorf("NIC section %+v", secs)
	}
}

func TestSectionsAreGeneric(t *testing.T) {
	h := &curev1.Hello{BootId: "b-9", Identity: &curev1.Identity{BootMac: "52:54:00:00:00:09", Macs: []string{"a", "b"}},
		Inventory: sampleInventory().GetInventory(), State: &curev1.RunnerState{Kind: curev1.RunnerState_IN_PHASE, Phase: "nvme"}}
	secs := Sections(h)
	var all []string
	for _, s := range secs {
		all = append(all, fmt.Sprint(s.Title, " ", s.Pairs))
	}
	got := strings.Join(all, "\n")
	for _, want := range []string{"boot ID b-9", "[boot MAC 52:54:00:00:00:09] [macs a, b]", "inventory [[system vendor Supermicro]", "[GPUs name=NVIDIA H100 serial=1653220000 VBIOS=96.00.99, index=1 name=NVIDIA H100", "[memory bytes 2.0 TiB]", "state [[kind IN_PHASE] [phase nvme]]"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}

func TestPrintNodeAndReportShowHardware(t *testing.T) {
	var b bytes.Buffer
	PrintNode(&b, &curev1.NodeDetail{NodeId: "gpu-1", Sku: "hgx-h100", State: "idle", Macs: []string{"52:54:00:00:00:01"}, Labels: map[string]string{"rack": "r1", "pool": "x"},
		BmcUrl: "https://10.0.0.1", BmcUsername: "admin", BmcPassword: "sealed in the store", BmcTls: "pinned certificate sha256:ab", Psids: 2, Inventory: sampleInventory()})
	out := b.String()
	for _, want := range []string{"node gpu-1  sku hgx-h100  state idle", "labels pool=x, rack=r1", "password sealed in the store", "PSIDs stored 2",
		"hardware reported at boot b-1 of run run-42 on 2025-10-09 08:53:20 UTC from 10.0.0.5", "serial: S4X9213", "GPUs (2)", "1653220001", "28.39.1002"} {
		if !strings.Contains(out, want) {
			t.Errorf("nodes show lacks %q:\n%s", want, out)
		}
	}
	// The sample's NICs are b8:3f:d2:…: none is the node's MAC.
	if !strings.Contains(out, "WARNING: none of these MACs is a NIC the node reported at boot b-1 (b8:3f:d2:00:00:01, b8:3f:d2:00:00:02)") {
		t.Errorf("nodes show does not warn that no reported NIC is in the node's MACs:\n%s", out)
	}
	b.Reset()
	PrintNode(&b, &curev1.NodeDetail{NodeId: "gpu-1", Macs: []string{"B8-3F-D2-00-00-02"}, Inventory: sampleInventory()})
	if strings.Contains(b.String(), "WARNING") {
		t.Errorf("warns though a reported NIC is the node's:\n%s", b.String())
	}
	b.Reset()
	PrintNode(&b, &curev1.NodeDetail{NodeId: "gpu-2"})
	if !strings.Contains(b.String(), "no hardware reported yet") {
		t.Errorf("node without inventory:\n%s", b.String())
	}
	r, _ := sampleReport()
	r.Inventory = sampleInventory()
	b.Reset()
	PrintReport(&b, r)
	if !strings.Contains(b.String(), "hardware reported at boot b-1 on") || !strings.Contains(b.String(), "S6E0001") {
		t.Errorf("report lacks the hardware:\n%s", b.String())
	}
}

func TestHTMLReportHardware(t *testing.T) {
	r, tl := sampleReport()
	r.Inventory = sampleInventory()
	r.Inventory.Inventory.System.Product = `<script>alert(1)</script>`
	var b bytes.Buffer
	if err := writeHTML(&b, r, tl, time.UnixMilli(t0)); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	hw := find(doc, func(n *html.Node) bool { return attr(n, "id") == "hardware" })
	if hw == nil {
		t.Fatal("no #hardware")
	}
	txt := text(hw)
	for _, want := range []string{"S4X9213", "GPUs (2)", "1653220001", "400 Gb/s", `<script>alert(1)</script>`} {
		if !strings.Contains(txt, want) {
			t.Errorf("hardware section lacks %q: %s", want, txt)
		}
	}
	walk(doc, func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "script" {
			t.Error("inventory text became a <script> element")
		}
	})
	r.Inventory = nil
	b.Reset()
	if err := writeHTML(&b, r, tl, time.UnixMilli(t0)); err != nil || !strings.Contains(b.String(), "No hardware inventory was reported") {
		t.Fatalf("no inventory: %v", err)
	}
}

// Whatever a node reports, the views neither panic nor pass a control
// character to a terminal.
func FuzzInventoryViews(f *testing.F) {
	b, _ := proto.Marshal(sampleInventory().GetInventory())
	f.Add(b)
	hostile := sampleInventory().GetInventory()
	hostile.System.Serial = "\x1b]0;x\x07\u202e"
	hostile.Gpus[0].Name = "\x9b2J"
	b, _ = proto.Marshal(hostile)
	f.Add(b)
	f.Fuzz(func(t *testing.T, wire []byte) {
		inv := &curev1.Inventory{}
		if proto.Unmarshal(wire, inv) != nil {
			return
		}
		var out bytes.Buffer
		PrintInventory(&out, &curev1.InventoryRecord{BootId: "b", Inventory: inv}, "")
		for _, r := range out.String() {
			if r < 0x20 && r != '\n' || r == 0x7f || r >= 0x80 && r <= 0x9f || r >= 0x202a && r <= 0x202e {
				t.Fatalf("control character %U in the terminal view", r)
			}
		}
		rep, _ := sampleReport()
		rep.Inventory = &curev1.InventoryRecord{Inventory: inv}
		if err := writeHTML(&out, rep, nil, time.UnixMilli(t0)); err != nil {
			t.Fatal(err)
		}
	})
}
