package natural

import (
	"slices"
	"sort"
	"testing"
)

func TestCompare(t *testing.T) {
	in := []string{"gpu/10", "nvme10n1", "gpu/2", "bmc", "gpu/1", "nvme0n1", "nvme2n1", "gpu/01", "disk/sda", "gpu"}
	sort.Slice(in, func(i, j int) bool { return Compare(in[i], in[j]) < 0 })
	want := []string{"bmc", "disk/sda", "gpu", "gpu/01", "gpu/1", "gpu/2", "gpu/10", "nvme0n1", "nvme2n1", "nvme10n1"}
	if !slices.Equal(in, want) {
		t.Errorf("got  %v\nwant %v", in, want)
	}
	for _, c := range [][2]string{{"a1", "a1"}, {"", ""}, {"x99999999999999999999", "x99999999999999999999"}} {
		if Compare(c[0], c[1]) != 0 {
			t.Errorf("Compare(%q, %q) != 0", c[0], c[1])
		}
	}
	// Numbers longer than any integer type still compare by value.
	if Compare("x99999999999999999999", "x100000000000000000000") >= 0 {
		t.Error("long numbers compared as text")
	}
}
