package mellanox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/tools/pci/pcitest"
	"github.com/cure-oss/cure/tools/pci/vpd"
)

func TestFindNICs(t *testing.T) {
	root := t.TempDir()
	for _, a := range []pcitest.Adapter{
		{Addr: "0000:17:00.0", Vendor: 0x15b3, Device: 0x1021, Class: 0x020000, VPD: vpd.Encode(vpd.Fields{Name: "NVIDIA ConnectX-7 HHHL Adapter Card", PartNumber: "MCX75310AAS-NEAT"})},
		{Addr: "0000:17:00.1", Vendor: 0x15b3, Device: 0x1021, Class: 0x020000},                         // port 2: same flash
		{Addr: "0000:17:01.0", Vendor: 0x15b3, Device: 0x101e, Class: 0x020000, PhysFn: "0000:17:00.0"}, // SR-IOV VF
		{Addr: "0000:3b:00.0", Vendor: 0x15b3, Device: 0x1021, Class: 0x020700},                         // InfiniBand
		{Addr: "0000:a3:00.0", Vendor: 0x15b3, Device: 0xa2dc, Class: 0x020000},                         // BlueField-3 NIC
		{Addr: "0000:a3:00.2", Vendor: 0x15b3, Device: 0xc2d5, Class: 0x080000},                         // rshim function
		{Addr: "0000:c1:00.0", Vendor: 0x15b3, Device: 0xa2dc, Class: 0x058000},                         // not a network class
		{Addr: "0000:00:03.0", Vendor: 0x1af4, Device: 0x1041, Class: 0x020000},                         // virtio-net
	} {
		pcitest.AddAdapter(t, root, a)
	}
	devs, err := FindNICs(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range devs {
		got = append(got, d.String())
	}
	want := []string{"0000:17:00.0 0x1021 ConnectX-7 MCX75310AAS-NEAT", "0000:3b:00.0 0x1021 ConnectX-7", "0000:a3:00.0 0xa2dc BlueField-3"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("devices\n%q\nwant\n%q", got, want)
	}
	if devs[0].Name != "NVIDIA ConnectX-7 HHHL Adapter Card" || devs[1].Class != 0x020700 {
		t.Errorf("%+v", devs[:2])
	}
	// No PCI bus at all (a fixture without sys/): nothing, not an error.
	if devs, err := FindNICs(t.TempDir()); err != nil || len(devs) != 0 {
		t.Errorf("empty root: %v %v", devs, err)
	}
	// An unreadable vendor file is an error naming it.
	os.WriteFile(filepath.Join(root, "sys/bus/pci/devices/0000:17:00.0/vendor"), []byte("zz\n"), 0o644)
	if _, err := FindNICs(root); err == nil || !strings.Contains(err.Error(), `0000:17:00.0/vendor: "zz" is not a hex number`) {
		t.Errorf("err = %v", err)
	}
}
