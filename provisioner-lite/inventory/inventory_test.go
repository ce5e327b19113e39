package inventory

import (
	"fmt"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/api/protowalk"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/protobuf/proto"
)

// sample is what a real GPU server's runner reports, roughly.
func sample() *curev1.Inventory {
	inv := &curev1.Inventory{
		System:      &curev1.SystemInfo{Vendor: "Supermicro", Product: "SYS-821GE-TNHR", Serial: "S4X9213", Uuid: "8d3c…", BiosVersion: "2.1"},
		MemoryBytes: 2 << 40, CpuCount: 224, CpuModel: "Intel(R) Xeon(R) Platinum 8480+", Kernel: "6.1.0-28-amd64",
	}
	for i := range 8 {
		inv.Gpus = append(inv.Gpus, &curev1.Gpu{Index: uint32(i), Name: "NVIDIA H100 80GB HBM3", Serial: fmt.Sprintf("165322%04d", i), PciAddress: fmt.Sprintf("0000:%02x:00.0", 0x18+i), Vbios: "96.00.99.00.01"})
		inv.Nvme = append(inv.Nvme, &curev1.NvmeController{Name: fmt.Sprintf("nvme%d", i), Model: "SAMSUNG MZTL63T8HBLT", Serial: fmt.Sprintf("S6E%05d", i), Firmware: "GDC7402Q"})
		inv.Nics = append(inv.Nics, &curev1.NetInterface{Name: fmt.Sprintf("ens%d", i), Mac: fmt.Sprintf("b8:3f:d2:00:00:%02x", i), Driver: "mlx5_core", SpeedMbps: 400000, LinkUp: true, Firmware: "28.39.1002"})
	}
	return inv
}

func TestMarshalKeepsARealInventory(t *testing.T) {
	inv := sample()
	js, cut, err := Marshal(inv)
	if err != nil || cut {
		t.Fatalf("Marshal: cut %v, %v", cut, err)
	}
	back, err := Unmarshal(js)
	if err != nil || !proto.Equal(back, inv) {
		t.Fatalf("round trip: %v\n%s", err, js)
	}
	if len(js) > 16<<10 {
		t.Errorf("a real inventory takes %d bytes", len(js))
	}
}

// Hostile strings are cleaned and cut, lists and the whole record bounded,
// and the caller's message is left alone.
func TestMarshalBoundsHostileInput(t *testing.T) {
	inv := sample()
	inv.System.Serial = "S1\x1b]0;pwned\x07\u202e" + strings.Repeat("x", 10_000)
	inv.CpuModel = "\x00\x01" // nothing left: the field goes
	for i := range 5000 {
		inv.Disks = append(inv.Disks, &curev1.BlockDevice{Name: fmt.Sprintf("sd%d", i), Model: strings.Repeat("M", 300), Serial: strings.Repeat("S", 300)})
	}
	before := proto.Clone(inv)
	js, cut, err := Marshal(inv)
	if err != nil || !cut {
		t.Fatalf("Marshal: cut %v, %v", cut, err)
	}
	if !proto.Equal(inv, before) {
		t.Fatal("Marshal changed its argument")
	}
	if len(js) > MaxJSON {
		t.Fatalf("%d bytes stored, bound %d", len(js), MaxJSON)
	}
	back, err := Unmarshal(js)
	if err != nil {
		t.Fatal(err)
	}
	if s := back.GetSystem().GetSerial(); !strings.HasPrefix(s, "S1\ufffd]0;pwned\ufffd\ufffd") || len(s) > MaxString || !textsafe.Safe(s) {
		t.Fatalf("serial stored as %q", s)
	}
	if back.GetCpuModel() != "\ufffd\ufffd" {
		t.Fatalf("cpu model %q", back.GetCpuModel())
	}
	if n := len(back.GetDisks()); n == 0 || n >= 5000 {
		t.Fatalf("%d disks kept of 5000", n)
	}
	if len(back.GetGpus()) != 8 || back.GetGpus()[7].GetSerial() != "1653220007" {
		t.Fatal("the small lists were cut with the big one")
	}
}

// Unknown fields (a runner speaking a newer schema, or junk) are not kept.
func TestBoundDropsUnknownFields(t *testing.T) {
	inv := sample()
	inv.ProtoReflect().SetUnknown([]byte{0xf8, 0x07, 0x01}) // field 127, varint 1
	if !Bound(inv) || len(inv.ProtoReflect().GetUnknown()) != 0 {
		t.Fatal("unknown field kept")
	}
}

func FuzzMarshal(f *testing.F) {
	b, _ := proto.Marshal(sample())
	f.Add(b)
	hostile := sample()
	hostile.System.Product = "\x1b[2J\u2066evil"
	hostile.Nics[0].Addresses = []string{strings.Repeat("a", 1000), "\xff\xfe"}
	b, _ = proto.Marshal(hostile)
	f.Add(b)
	f.Add([]byte{0x0a, 0x02, 0x1a, 0x00})
	f.Fuzz(func(t *testing.T, wire []byte) {
		inv := &curev1.Inventory{}
		if proto.Unmarshal(wire, inv) != nil {
			return
		}
		js, _, err := Marshal(inv)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		if len(js) > MaxJSON {
			t.Fatalf("%d bytes", len(js))
		}
		back, err := Unmarshal(js)
		if err != nil {
			t.Fatalf("stored inventory does not read back: %v", err)
		}
		protowalk.Strings(back, func(s string) string {
			if len(s) > MaxString || !textsafe.Safe(s) || strings.ContainsAny(s, "\n\t") {
				t.Fatalf("stored string %q", s)
			}
			return s
		})
		// Bounding is idempotent: what is stored is already within bounds.
		if js2, cut, _ := Marshal(back); cut || string(js2) != string(js) {
			t.Fatalf("second Marshal changed the record (cut %v)", cut)
		}
	})
}

func TestUnlistedNICs(t *testing.T) {
	inv := &curev1.Inventory{Nics: []*curev1.NetInterface{{Name: "lo", Mac: "00:00:00:00:00:00"}, {Name: "eth0", Mac: "52:54:00:C0:DE:99"}, {Name: "eth1", Mac: "52:54:00:c0:de:9a"}}}
	if got := UnlistedNICs([]string{"52-54-00-c0-de-99"}, inv); got != nil {
		t.Errorf("a listed NIC (other spelling): %v", got)
	}
	if got := UnlistedNICs([]string{"52:54:00:c0:de:01"}, inv); strings.Join(got, ",") != "52:54:00:c0:de:99,52:54:00:c0:de:9a" {
		t.Errorf("no NIC listed: %v", got)
	}
	if got := UnlistedNICs([]string{"52:54:00:c0:de:01"}, &curev1.Inventory{}); got != nil {
		t.Errorf("no NIC reported: %v", got)
	}
}
