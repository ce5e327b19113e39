package inventory

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"
)

// SMBIOS strings, the CPU brand string, NVMe Identify and disk model bytes
// are the hardware's. A byte that is not UTF-8 in any of them used to make
// the Hello carrying the inventory fail to marshal, so the runner could
// never register; they now arrive with U+FFFD in its place.
func TestCollectMarshalsNonUTF8Hardware(t *testing.T) {
	r := fixtureRoot(t)
	// The kernel's dmi/id strings, read when the raw tables are absent.
	if err := os.RemoveAll(filepath.Join(r, "sys/firmware")); err != nil {
		t.Fatal(err)
	}
	write(t, r, "sys/class/dmi/id/product_serial", "SN-\xff\xfe-1\n")
	write(t, r, "sys/class/dmi/id/sys_vendor", "Vend\xc3\x28or\n")
	write(t, r, "proc/cpuinfo", "processor\t: 0\nmodel name\t: CPU \xf0\x28\x8c\x28\n")
	write(t, r, "sys/class/nvme/nvme0/serial", "dead\x80beef\n")
	dev := &fakeNVMe{vid: 0x1b36, sn: "dead\x80beef", mn: "QEMU \xffNVMe", fr: "7.2.22"}
	inv, id, err := Collect(context.Background(), Options{
		Root: r, NodeID: "n1", Log: quiet(),
		Links:    func() ([]Link, error) { return nil, nil },
		OpenNVMe: func(string) (AdminCloser, error) { return dev, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proto.Marshal(inv); err != nil {
		t.Errorf("inventory does not marshal: %v", err)
	}
	if _, err := proto.Marshal(id); err != nil {
		t.Errorf("identity does not marshal: %v", err)
	}
	if s := inv.System; s.Serial != "SN-\uFFFD-1" || s.Vendor != "Vend\uFFFD(or" || id.SystemSerial != s.Serial {
		t.Errorf("system = %v", s)
	}
	if inv.Nvme[0].Serial != "dead\uFFFDbeef" || inv.Nvme[0].Model != "QEMU \uFFFDNVMe" {
		t.Errorf("nvme = %v", inv.Nvme[0])
	}
}
