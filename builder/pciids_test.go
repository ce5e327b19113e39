package builder

import (
	"os"
	"strings"
	"testing"
)

const pciSample = `#	List of PCI ID's
#	Version: 2023.04.10

10de  NVIDIA Corporation
	2330  GH100[H100 SXM5 80GB]
		10de 16c1  H100 SXM5 80GB
15b3  Mellanox Technologies
	1021  MT2910 Family [ConnectX-7]
8086  Intel Corporation
	1572  Ethernet Controller X710 for 10GbE SFP+

# List of known device classes
C 02  Network controller
	00  Ethernet controller
C 03  Display controller
	02  3D controller
		00  VGA controller
`

func TestTrimPCIIDs(t *testing.T) {
	got, err := trimPCIIDs([]byte(pciSample), []string{"10de", "15b3"})
	if err != nil {
		t.Fatal(err)
	}
	want := "10de  NVIDIA Corporation\n\t2330  GH100[H100 SXM5 80GB]\n15b3  Mellanox Technologies\n\t1021  MT2910 Family [ConnectX-7]\n" +
		"C 02  Network controller\n\t00  Ethernet controller\nC 03  Display controller\n\t02  3D controller\n\t\t00  VGA controller\n"
	if string(got) != want {
		t.Errorf("trimmed:\n%s\nwant:\n%s", got, want)
	}
	all, _ := trimPCIIDs([]byte(pciSample), nil)
	if !strings.Contains(string(all), "8086  Intel") || strings.Contains(string(all), "10de 16c1") {
		t.Errorf("no vendors listed keeps all but subsystems:\n%s", all)
	}
	if _, err := trimPCIIDs([]byte(pciSample), []string{"1af4"}); err == nil || !strings.Contains(err.Error(), "1af4") {
		t.Errorf("unknown vendor: %v", err)
	}
	if _, err := trimPCIIDs([]byte("10de  NVIDIA\n"), nil); err == nil || !strings.Contains(err.Error(), "class list") {
		t.Errorf("not pci.ids: %v", err)
	}
	if _, err := trimPCIIDs([]byte("nonsense here\n"), nil); err == nil || !strings.Contains(err.Error(), "pci.ids:1:") {
		t.Errorf("bad line: %v", err)
	}
}

// Debian's file, trimmed as initramfs/cure.yaml does, still names the
// devices the inventory tests and the QEMU node show.
func TestTrimDebianPCIIDs(t *testing.T) {
	data, err := os.ReadFile("/usr/share/misc/pci.ids")
	if err != nil {
		t.Skipf("Debian's pci.ids not installed: %v", err)
	}
	got, err := trimPCIIDs(data, []string{"10de", "15b3", "1af4", "1b36"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"\t1021  MT2910 Family [ConnectX-7]", "\t1000  Virtio network device", "\t2330  GH100[H100 SXM5 80GB]", "C 06  Bridge"} {
		if !strings.Contains(string(got), s+"\n") {
			t.Errorf("trimmed file lacks %q", s)
		}
	}
	if len(got) > len(data)/4 {
		t.Errorf("trimmed to %d of %d bytes", len(got), len(data))
	}
}
