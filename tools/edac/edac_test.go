package edac

import (
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, root, rel, s string) {
	t.Helper()
	p := filepath.Join(root, rel)
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(s+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A skx_edac-like controller (per-DIMM directories, driver labels, and the
// legacy csrow view of the same counts) and a rank-based one with
// ghes-style labels.
func TestRead(t *testing.T) {
	root := t.TempDir()
	mc := "sys/devices/system/edac/mc/"
	for i, v := range []struct{ label, loc, ce, ue string }{
		{"CPU_SrcID#0_MC#0_Chan#0_DIMM#0", "channel 0 slot 0", "0", "0"},
		{"CPU_SrcID#0_MC#0_Chan#1_DIMM#0", "channel 1 slot 0", "7", "0"},
	} {
		d := mc + "mc0/dimm" + []string{"0", "10"}[i] + "/"
		write(t, root, d+"dimm_label", v.label)
		write(t, root, d+"dimm_location", v.loc)
		write(t, root, d+"dimm_ce_count", v.ce)
		write(t, root, d+"dimm_ue_count", v.ue)
	}
	write(t, root, mc+"mc0/csrow0/ch0_ce_count", "7") // the same errors, csrow view: not counted twice
	write(t, root, mc+"mc0/ce_noinfo_count", "1")
	for i, v := range []struct{ label, ce, ue string }{{"NODE 1 DIMM_B1", "0", "1"}, {"NODE 1 DIMM_B2", "2", "0"}} {
		d := mc + "mc1/rank" + []string{"0", "1"}[i] + "/"
		write(t, root, d+"dimm_label", v.label)
		write(t, root, d+"dimm_ce_count", v.ce)
		write(t, root, d+"dimm_ue_count", v.ue)
	}
	write(t, root, mc+"mc1/ue_noinfo_count", "4")
	s, err := Read(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []DIMM{
		{MC: 0, Name: "dimm0", Label: "CPU_SrcID#0_MC#0_Chan#0_DIMM#0", Location: "channel 0 slot 0"},
		{MC: 0, Name: "dimm10", Label: "CPU_SrcID#0_MC#0_Chan#1_DIMM#0", Location: "channel 1 slot 0", CE: 7},
		{MC: 1, Name: "rank0", Label: "NODE 1 DIMM_B1", UE: 1},
		{MC: 1, Name: "rank1", Label: "NODE 1 DIMM_B2", CE: 2},
	}
	if len(s.DIMMs) != len(want) {
		t.Fatalf("dimms %+v", s.DIMMs)
	}
	for i := range want {
		if s.DIMMs[i] != want[i] {
			t.Errorf("dimm %d = %+v, want %+v", i, s.DIMMs[i], want[i])
		}
	}
	if s.CENoInfo != 1 || s.UENoInfo != 4 {
		t.Errorf("noinfo %d %d", s.CENoInfo, s.UENoInfo)
	}
}

func TestNoEDAC(t *testing.T) {
	root := t.TempDir()
	if _, err := Read(root); err != ErrNoEDAC {
		t.Errorf("no edac dir: %v", err)
	}
	// The EDAC core loaded (as in the QEMU guest) but no driver: mc/ empty.
	os.MkdirAll(filepath.Join(root, "sys/devices/system/edac/mc"), 0o755)
	if _, err := Read(root); err != ErrNoEDAC {
		t.Errorf("empty mc dir: %v", err)
	}
}

func TestBadCount(t *testing.T) {
	root := t.TempDir()
	write(t, root, "sys/devices/system/edac/mc/mc0/dimm0/dimm_ce_count", "lots")
	write(t, root, "sys/devices/system/edac/mc/mc0/dimm0/dimm_ue_count", "0")
	if _, err := Read(root); err == nil {
		t.Error("a garbled counter: no error")
	}
}

func TestMatchLocator(t *testing.T) {
	locs := []string{"DIMM_A1", "DIMM_B1", "DIMM_B2", "A1", "DIMM 0"}
	for label, want := range map[string]string{
		"DIMM_A1":                        "DIMM_A1",
		"NODE 1 DIMM_B2":                 "DIMM_B2",
		"P0_Node0_Channel0_DIMM_A1":      "DIMM_A1",
		"BANK 0 DIMM 0":                  "DIMM 0",
		"CPU_SrcID#0_MC#0_Chan#0_DIMM#0": "",
		"DIMM_B10":                       "",
	} {
		if got := MatchLocator(label, locs); got != want {
			t.Errorf("MatchLocator(%q) = %q, want %q", label, got, want)
		}
	}
}
