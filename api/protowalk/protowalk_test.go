package protowalk

import (
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

func TestStringsReachesEveryString(t *testing.T) {
	m := &curev1.Hello{
		Token:     "t",
		Identity:  &curev1.Identity{BootMac: "m", Macs: []string{"a", "b"}},
		Inventory: &curev1.Inventory{Disks: []*curev1.BlockDevice{{Serial: "s1"}, {Serial: "s2"}}},
	}
	Strings(m, strings.ToUpper)
	if m.Token != "T" || m.Identity.BootMac != "M" || m.Identity.Macs[1] != "B" || m.Inventory.Disks[1].Serial != "S2" {
		t.Fatalf("not every string rewritten: %v", m)
	}
	l := &curev1.Log{Message: "x", Attrs: map[string]string{"k1": "v1", "k2": "v2"}}
	Strings(l, strings.ToUpper)
	if len(l.Attrs) != 2 || l.Attrs["K1"] != "V1" || l.Attrs["K2"] != "V2" || l.Message != "X" {
		t.Fatalf("map keys and values: %v", l.Attrs)
	}
	Strings(nil, strings.ToUpper) // no panic
}
