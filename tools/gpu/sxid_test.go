package gpu

import (
	"strings"
	"testing"
)

func TestSXid(t *testing.T) {
	log := []string{
		"nvidia-nvswitch3: SXid (PCI:0000:88:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
		"nvidia-nvswitch3: SXid (PCI:0000:88:00.0): 12028, Data {0x00000000, 0x00000001, 0x00000000}",
		"nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 24007, Fatal, Link 44 sourcetrack TCEN0 crumbstore ECC DBE Error (First)",
		"NVRM: GPU at PCI:0000:18:00: GPU-1234",
	}
	s, ok := ParseSXid(log[2])
	if !ok || s.Switch != "0000:06:00.0" || s.Code != 24007 || !s.Fatal || s.Link != 44 || !strings.HasPrefix(s.Text, "sourcetrack") {
		t.Errorf("parsed %+v %t", s, ok)
	}
	if _, ok := ParseSXid(log[1]); ok {
		t.Error("a Data line read as an error")
	}
	v := SXidVerdict(log)
	if v.Status != Fail || v.Observed != "1 fatal, 1 non-fatal" ||
		!strings.Contains(v.Message, "fatal: NVSwitch 0000:06:00.0 SXid 24007 link 44") || !strings.Contains(v.Message, "non-fatal: NVSwitch 0000:88:00.0 SXid 12028 link 32") {
		t.Errorf("verdict %v", v)
	}
	if v := SXidVerdict(log[:2]); v.Status != Pass || !strings.Contains(v.Message, "12028") {
		t.Errorf("non-fatal only: %v", v)
	}
	if v := SXidVerdict(nil); v.Status != Pass || v.Observed != "none in the kernel log" {
		t.Errorf("none: %v", v)
	}
}
