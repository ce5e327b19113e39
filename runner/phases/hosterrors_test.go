package phases

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

func copyInto(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(dst), 0o755)
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestValidateHostEvidence: the validate phase shortens the machine-check
// poll, judges the boot's machine checks after the suite (the recorded
// QEMU guest's corrected memory error, placed on its one DIMM), and a
// failing check's verdict carries the kernel log lines naming its device.
func TestValidateHostEvidence(t *testing.T) {
	root := nicFixture(t, map[string]string{"eth0": "up", "eth1": "down"})
	kmsg, err := os.ReadFile("../../tools/kmsg/testdata/qemu-tcg-mce.kmsg")
	if err != nil {
		t.Fatal(err)
	}
	kmsg = append(kmsg, "6,900,9000000,-;mlx5_core 0000:17:00.1 eth1: Link down\n"...)
	os.MkdirAll(filepath.Join(root, "dev"), 0o755)
	os.WriteFile(filepath.Join(root, "dev/kmsg"), kmsg, 0o644)
	copyInto(t, "../../tools/memmap/testdata/DMI", filepath.Join(root, "sys/firmware/dmi/tables/DMI"))
	copyInto(t, "../../tools/memmap/testdata/smbios_entry_point", filepath.Join(root, "sys/firmware/dmi/tables/smbios_entry_point"))
	interval := filepath.Join(root, "sys/devices/system/machinecheck/machinecheck0/check_interval")
	os.MkdirAll(filepath.Dir(interval), 0o755)
	os.WriteFile(interval, []byte("300\n"), 0o644)

	inv := &curev1.Inventory{Nics: []*curev1.NetInterface{{Name: "eth0", PciAddress: "0000:17:00.0"}, {Name: "eth1", PciAddress: "0000:17:00.1"}}}
	e := New(Config{Log: quiet(), Root: root, MCEPoll: time.Second,
		Inventory: func(context.Context) (*curev1.Inventory, error) { return inv, nil }})
	em := &recEmitter{}
	out := e.Run(context.Background(), "validate", &curev1.Assignment{RunId: "r", Mode: curev1.Mode_MODE_DIAGNOSTIC,
		ManifestYaml: []byte(linkSuite), ManifestName: "links.yaml"}, em)
	if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "dimm/DIMM 0 hardware_errors") {
		t.Errorf("outcome %+v", out)
	}
	if b, _ := os.ReadFile(interval); string(b) != "1" {
		t.Errorf("check_interval %q, want 1", b)
	}
	got := map[string]*curev1.Verdict{}
	for _, v := range em.verdicts {
		got[v.Component] = v
	}
	d := got["dimm/DIMM 0"]
	if d == nil || d.Status != curev1.VerdictStatus_FAIL || d.Check != "hardware_errors" || !strings.Contains(d.Message, "serial S0001") ||
		!strings.Contains(d.Message, "Machine Check: 0 Bank 9: 9c0000000000009f") {
		t.Errorf("dimm verdict %v", d)
	}
	n := got["nic/eth1"]
	_, blocks := curev1.SplitEvidence(n.GetMessage())
	if n == nil || len(blocks) != 1 || !blocks[0].IsKernelLog() || len(blocks[0].Lines) != 1 || !strings.Contains(blocks[0].Lines[0], "eth1: Link down") {
		t.Errorf("nic/eth1 verdict %v", n)
	}
	if _, blocks := curev1.SplitEvidence(got["nic/eth0"].GetMessage()); len(blocks) != 0 {
		t.Errorf("a passing verdict got evidence: %v", got["nic/eth0"])
	}
}
