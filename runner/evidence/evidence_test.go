package evidence

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/kmsg"
)

func inv() *curev1.Inventory {
	return &curev1.Inventory{
		Nvme: []*curev1.NvmeController{{Name: "nvme0", PciAddress: "0000:01:00.0", Namespaces: []string{"nvme0n1"}},
			{Name: "nvme1", PciAddress: "0000:02:00.0", Namespaces: []string{"nvme1n1"}}},
		Nics: []*curev1.NetInterface{{Name: "eth1", PciAddress: "0000:17:00.1"}, {Name: "eth0", PciAddress: "0000:17:00.0"}, {Name: "bond0"}},
		Gpus: []*curev1.Gpu{{PciAddress: "0000:1b:00.0"}},
	}
}

// The recorded QEMU boot (the NVMe controller at 0000:01:00.0 was probed
// by the PCI core) plus driver lines in the kernel's formats.
func log(t *testing.T) []kmsg.Record {
	t.Helper()
	recs, err := kmsg.Read("../../tools/kmsg/testdata/qemu-tcg-mce.kmsg")
	if err != nil {
		t.Fatal(err)
	}
	extra, _ := kmsg.Parse(strings.NewReader(
		"6,900,9000000,-;nvme nvme0: pci function 0000:01:00.0\n SUBSYSTEM=pci\n DEVICE=+pci:0000:01:00.0\n" +
			"4,901,9100000,-;nvme nvme0: I/O 12 QID 1 timeout, aborting\n" +
			"3,902,9200000,-;I/O error, dev nvme0n1, sector 2048 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 2\n" +
			"6,903,9300000,-;nvme nvme10: pci function 0000:0a:00.0\n" +
			"6,904,9400000,-;mlx5_core 0000:17:00.0: Port module event: module 0, Cable unplugged\n" +
			"4,905,9500000,-;NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n" +
			"4,906,9600000,-;mce: CPU1: Package temperature above threshold, cpu clock throttled (total events = 1)\n"))
	return append(recs, extra...)
}

func lines(t *testing.T, component string, root string) []string {
	t.Helper()
	msg := Attach("failed", log(t), For(component, inv(), root))
	_, blocks := curev1.SplitEvidence(msg)
	if len(blocks) == 0 {
		return nil
	}
	if len(blocks) != 1 || !blocks[0].IsKernelLog() {
		t.Fatalf("%s: blocks %+v", component, blocks)
	}
	return blocks[0].Lines
}

func TestAttach(t *testing.T) {
	root := t.TempDir()
	for i, pkg := range []string{"0", "1"} {
		d := filepath.Join(root, "sys/devices/system/cpu", "cpu"+string(rune('0'+i)), "topology")
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "physical_package_id"), []byte(pkg+"\n"), 0o644)
	}
	got := lines(t, "nvme/0", root)
	if len(got) != 5 || !strings.Contains(got[0], "pci 0000:01:00.0: [1b36:0010]") || !strings.Contains(got[3], "QID 1 timeout") ||
		!strings.Contains(got[4], "dev nvme0n1") {
		t.Errorf("nvme/0 lines %q", got)
	}
	for _, l := range got {
		if strings.Contains(l, "nvme10") {
			t.Errorf("nvme/0 took a line of nvme10: %q", l)
		}
	}
	if got := lines(t, "disk/nvme0n1", root); len(got) != 5 {
		t.Errorf("disk/nvme0n1: the controller's lines too: %q", got)
	}
	if got := lines(t, "nic/0", root); len(got) != 1 || !strings.Contains(got[0], "mlx5_core 0000:17:00.0") {
		t.Errorf("nic/0 (the first port on the bus) %q", got)
	}
	if got := lines(t, "nic/eth1", root); len(got) != 0 {
		t.Errorf("nic/eth1 has no lines: %q", got)
	}
	if got := lines(t, "gpu/0", root); len(got) != 1 || !strings.Contains(got[0], "Xid (PCI:0000:1b:00): 79") {
		t.Errorf("gpu/0 %q", got)
	}
	if got := lines(t, "cpu/1", root); len(got) != 1 || !strings.Contains(got[0], "CPU1: Package temperature") {
		t.Errorf("cpu/1 %q", got)
	}
	if got := lines(t, "dimm/DIMM 0", root); len(got) != 4 || !strings.Contains(got[3], "PROCESSOR 2:60fb1") {
		t.Errorf("dimm lines (hardware errors) %q", got)
	}
	msg := Attach("failed", log(t), For("nvme/0", inv(), root))
	if !strings.Contains(msg, "--- kernel log (last 5 of 5 lines naming nvme0, nvme0n1, 0000:01:00.0) ---") {
		t.Errorf("title: %q", msg)
	}
	if Attach("x", log(t), For("hwmon/coretemp/Core 0", inv(), root)) != "x" {
		t.Error("a component without keys got lines")
	}
}

func TestBounded(t *testing.T) {
	var recs []kmsg.Record
	for i := range 50 {
		recs = append(recs, kmsg.Record{Seq: uint64(i), Message: "nvme nvme0: reset"})
	}
	_, blocks := curev1.SplitEvidence(Attach("m", recs, Keys{Names: []string{"nvme0"}}))
	if len(blocks) != 1 || len(blocks[0].Lines) != MaxLines || !strings.Contains(blocks[0].Title, "last 20 of 50") {
		t.Errorf("blocks %+v", blocks)
	}
}

func TestContainsWord(t *testing.T) {
	for _, c := range []struct {
		s, w string
		want bool
	}{{"dev nvme0n1,", "nvme0n1", true}, {"nvme10: x", "nvme1", false}, {"eth0", "eth0", true}, {"veth0x", "eth0", false}, {"a mlx5_0 b", "mlx5_0", true}} {
		if containsWord(c.s, c.w) != c.want {
			t.Errorf("containsWord(%q, %q) = %t", c.s, c.w, !c.want)
		}
	}
}
