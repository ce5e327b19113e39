package inventory

import (
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/cure-oss/cure/runner/inventory/invtest"
	"google.golang.org/protobuf/proto"
)

// FuzzSMBIOS reads SMBIOS tables as the firmware wrote them (sysfs
// firmware/dmi/tables): whatever the bytes, reading them neither panics nor
// yields strings a Hello could not carry, and a slot's size is 0 exactly
// when it is reported empty.
func FuzzSMBIOS(f *testing.F) {
	root := invtest.Root(f)
	entry, _ := os.ReadFile(filepath.Join(root, "sys/firmware/dmi/tables/smbios_entry_point"))
	dmi, _ := os.ReadFile(filepath.Join(root, "sys/firmware/dmi/tables/DMI"))
	f.Add(entry, dmi)
	invtest.SetDIMMs(f, root, []invtest.DIMM{{Locator: "A1", SizeMiB: 4096}, {Locator: "B\xff3"}})
	entry2, _ := os.ReadFile(filepath.Join(root, "sys/firmware/dmi/tables/smbios_entry_point"))
	dmi2, _ := os.ReadFile(filepath.Join(root, "sys/firmware/dmi/tables/DMI"))
	f.Add(entry2, dmi2)
	f.Add(entry, dmi[:40])
	f.Add(entry[:16], dmi)
	f.Add(entry, []byte{17, 0x28, 0, 0x11})
	f.Add(entry, append([]byte{17, 0x05, 0, 0x11, 1}, 'x', 0, 0))
	f.Fuzz(func(t *testing.T, entry, dmi []byte) {
		r := t.TempDir()
		d := filepath.Join(r, "sys/firmware/dmi/tables")
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "smbios_entry_point"), entry, 0o644)
		os.WriteFile(filepath.Join(d, "DMI"), dmi, 0o644)
		info, err := readSMBIOS(r)
		if err != nil {
			return
		}
		sys, _ := systemFromSMBIOS(info)
		dimms, _ := dimmsFromSMBIOS(info)
		if sys != nil {
			if _, err := proto.Marshal(sys); err != nil {
				t.Fatalf("system info does not marshal: %v", err)
			}
		}
		for _, dm := range dimms {
			if _, err := proto.Marshal(dm); err != nil {
				t.Fatalf("dimm does not marshal: %v", err)
			}
			if !utf8.ValidString(dm.Locator) || (dm.SizeBytes == 0 && dm.Serial != "") {
				t.Fatalf("dimm %v", dm)
			}
		}
	})
}

// FuzzPCIFunction lists a PCI bus whose function's vendor, device, class
// and numa_node files hold arbitrary bytes (sysfs bus/pci/devices/*/, as
// the kernel and device report them): no panic, and every name comes out
// valid UTF-8.
func FuzzPCIFunction(f *testing.F) {
	f.Add("0x10de\n", "0x2330\n", "0x030200\n", "1\n")
	f.Add("0x10de\n", "0x1af1\n", "0x068000\n", "-1\n")
	f.Add("0x10de", "", "", "")
	f.Add("", "", "", "")
	f.Add("0xZZZZ\n", "0x123456789\n", "0x-1\n", "99999999999\n")
	f.Fuzz(func(t *testing.T, vendor, device, class, numa string) {
		r := t.TempDir()
		fn := "sys/bus/pci/devices/0000:1b:00.0/"
		invtest.Write(t, r, fn+"vendor", vendor)
		invtest.Write(t, r, fn+"device", device)
		invtest.Write(t, r, fn+"class", class)
		invtest.Write(t, r, fn+"numa_node", numa)
		invtest.CopyFile(t, "invtest/testdata/pci.ids", filepath.Join(r, "usr/share/misc/pci.ids"))
		o := &Options{Root: r, Log: quiet()}
		devs, err := pciDevices(o, loadPCIDB(o))
		if err != nil {
			return
		}
		gpus, sw := gpusAndSwitches(devs)
		for _, g := range gpus {
			if _, err := proto.Marshal(g); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range sw {
			if _, err := proto.Marshal(s); err != nil {
				t.Fatal(err)
			}
		}
	})
}
