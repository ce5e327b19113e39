package hwerrors

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/checks"
)

func copyTo(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	write(t, dst, string(b))
}

func write(t *testing.T, dst, s string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(dst), 0o755)
	if err := os.WriteFile(dst, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// node is a root with the QEMU guest's recorded kernel log (a corrected
// memory error at 0x1000 polled from CPU 0 bank 9), its SMBIOS tables (one
// DIMM, "DIMM 0", serial S0001) and its /proc/interrupts rows.
func node(t *testing.T) string {
	root := t.TempDir()
	copyTo(t, "../../kmsg/testdata/qemu-tcg-mce.kmsg", filepath.Join(root, "dev/kmsg"))
	copyTo(t, "../../memmap/testdata/DMI", filepath.Join(root, "sys/firmware/dmi/tables/DMI"))
	copyTo(t, "../../memmap/testdata/smbios_entry_point", filepath.Join(root, "sys/firmware/dmi/tables/smbios_entry_point"))
	write(t, filepath.Join(root, "proc/interrupts"), "           CPU0       CPU1\nMCE:          0          0   Machine check exceptions\nMCP:         42         42   Machine check polls\n")
	return root
}

// TestCorrectedMemoryErrorNamesDIMM: the machine check's address maps to
// the node's only DIMM, which the verdict names with its serial; the
// kernel's lines of the record are the evidence.
func TestCorrectedMemoryErrorNamesDIMM(t *testing.T) {
	vs, err := CheckNode(context.Background(), Options{Root: node(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 {
		t.Fatalf("verdicts %+v", vs)
	}
	v := vs[0]
	if v.Component != "dimm/DIMM 0" || v.Check != Check || v.Status != checks.Fail ||
		v.Observed != "correctedErrors=1 uncorrectedErrors=0" || v.Expected != "correctedErrors<=0 uncorrectedErrors<=0" {
		t.Errorf("verdict %+v", v)
	}
	text, blocks := curev1.SplitEvidence(v.Message)
	for _, want := range []string{"correctedErrors=1 outside correctedErrors<=0",
		"DIMM DIMM 0 (serial S0001, part M321R8GA0BB0-CQKZJ, bank BANK)",
		"CPU 0 bank 9: corrected memory controller read error, status 0x9c0000000000009f, address 0x1000",
		"0x1000 is in a memory array (SMBIOS type 19) with one populated device"} {
		if !strings.Contains(text, want) {
			t.Errorf("message lacks %q:\n%s", want, text)
		}
	}
	if len(blocks) != 2 || blocks[0].Identity()["serial"] != "S0001" || !blocks[1].IsKernelLog() || len(blocks[1].Lines) != 3 ||
		blocks[1].Lines[0] != "[    5.774702] mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 9: 9c0000000000009f" {
		t.Errorf("evidence %+v", blocks)
	}
	// A site that tolerates one corrected error per part passes it, still named.
	vs, _ = CheckNode(context.Background(), Options{Root: node(t), MaxCorrected: 1})
	if len(vs) != 1 || vs[0].Status != checks.Pass || vs[0].Component != "dimm/DIMM 0" {
		t.Errorf("MaxCorrected 1: %+v", vs)
	}
}

// TestNoMemoryMap: without SMBIOS tables the address cannot be placed; the
// verdict is the memory's, saying why.
func TestNoMemoryMap(t *testing.T) {
	root := node(t)
	os.RemoveAll(filepath.Join(root, "sys/firmware"))
	vs, _ := CheckNode(context.Background(), Options{Root: root})
	if len(vs) != 1 || vs[0].Component != "memory" || vs[0].Status != checks.Fail || !strings.Contains(vs[0].Message, "no SMBIOS memory map") {
		t.Errorf("verdicts %+v", vs)
	}
}

// TestCPUAndEDAC: a cache error is the CPU socket's; EDAC counters name
// their DIMM through the label's slot, or by label when no slot matches.
func TestCPUAndEDAC(t *testing.T) {
	root := node(t)
	write(t, filepath.Join(root, "dev/kmsg"),
		"0,10,1000000,-;mce: [Hardware Error]: CPU 3: Machine Check Exception: 5 Bank 1: b200000000000134\n"+
			"0,11,1000001,-;mce: [Hardware Error]: TSC 1\n"+
			"0,12,1000002,-;mce: [Hardware Error]: PROCESSOR 0:806f8 TIME 1 SOCKET 1 APIC 6 microcode 2b000571\n"+
			"3,13,2000000,-;EDAC MC0: 2 CE memory read error on NODE 0 DIMM 0 (channel:0 slot:0 page:0x1 offset:0x0 grain:32)\n")
	mc := "sys/devices/system/edac/mc/mc0/"
	write(t, filepath.Join(root, mc+"dimm0/dimm_label"), "NODE 0 DIMM 0\n")
	write(t, filepath.Join(root, mc+"dimm0/dimm_ce_count"), "2\n")
	write(t, filepath.Join(root, mc+"dimm0/dimm_ue_count"), "0\n")
	write(t, filepath.Join(root, mc+"dimm1/dimm_label"), "CPU_SrcID#0_MC#0_Chan#1_DIMM#0\n")
	write(t, filepath.Join(root, mc+"dimm1/dimm_ce_count"), "0\n")
	write(t, filepath.Join(root, mc+"dimm1/dimm_ue_count"), "1\n")
	vs, _ := CheckNode(context.Background(), Options{Root: root})
	got := map[string]checks.Verdict{}
	for _, v := range vs {
		got[v.Component] = v
	}
	if len(vs) != 3 {
		t.Fatalf("verdicts %+v", vs)
	}
	if v := got["cpu/1"]; v.Status != checks.Fail || v.Observed != "correctedErrors=0 uncorrectedErrors=1" ||
		!strings.Contains(v.Message, "CPU 3 bank 1: uncorrected, processor context corrupt cache hierarchy") {
		t.Errorf("cpu/1: %+v", v)
	}
	if v := got["dimm/DIMM 0"]; v.Status != checks.Fail || v.Observed != "correctedErrors=2 uncorrectedErrors=0" ||
		!strings.Contains(v.Message, "serial S0001") || !strings.Contains(v.Message, "EDAC MC0: 2 CE memory read error on NODE 0 DIMM 0") {
		t.Errorf("dimm/DIMM 0: %+v", v)
	}
	if v := got["dimm/CPU_SrcID#0_MC#0_Chan#1_DIMM#0"]; v.Status != checks.Fail || !strings.Contains(v.Message, "no SMBIOS slot matches its label") {
		t.Errorf("unmatched label: %+v", v)
	}
}

// TestCleanBoot: one PASS saying what was looked at.
func TestCleanBoot(t *testing.T) {
	root := node(t)
	write(t, filepath.Join(root, "dev/kmsg"), "6,1,100,-;Linux version 6.1.0\n")
	vs, _ := CheckNode(context.Background(), Options{Root: root})
	if len(vs) != 1 || vs[0].Component != "host" || vs[0].Status != checks.Pass ||
		vs[0].Message != "no machine checks in this boot's kernel log; 84 bank polls, 0 #MC exceptions; no EDAC driver for this memory controller" {
		t.Errorf("verdicts %+v", vs)
	}
	os.Remove(filepath.Join(root, "dev/kmsg"))
	vs, _ = CheckNode(context.Background(), Options{Root: root})
	if len(vs) != 1 || vs[0].Status != checks.Skip || !strings.Contains(vs[0].Message, "no kernel log") {
		t.Errorf("no kernel log: %+v", vs)
	}
	os.Mkdir(filepath.Join(root, "dev/kmsg"), 0o755) // unreadable as a log
	vs, _ = CheckNode(context.Background(), Options{Root: root})
	if len(vs) != 1 || vs[0].Status != checks.Error || !strings.Contains(vs[0].Message, "kernel log unreadable") {
		t.Errorf("unreadable kernel log: %+v", vs)
	}
}
