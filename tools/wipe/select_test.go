package wipe

import (
	"strings"
	"testing"

	"github.com/cure-oss/cure/tools/blockdev"
)

func TestWipeRefusesAmbiguous(t *testing.T) {
	disks := []blockdev.Disk{
		{Name: "nvme0n1", Serial: "A", Transport: "nvme", Model: "Data", SizeBytes: 1 << 40},
		{Name: "nvme1n1", Serial: "B", Transport: "nvme", Model: "Data", SizeBytes: 1 << 40},
		{Name: "sda", Serial: "USB1", Transport: "usb", Model: "Stick", SizeBytes: 1 << 34, BootMedium: true},
	}
	cases := []struct {
		name   string
		disks  []blockdev.Disk
		sel    blockdev.Selector
		errHas string
	}{
		{"empty selector", disks, blockdev.Selector{}, "selector is empty"},
		{"boot medium", disks, blockdev.Selector{Transport: "any"}, "sda is the boot medium"},
		{"boot medium by name", disks, blockdev.Selector{Name: "sda"}, "sda is the boot medium"},
		{"no match", disks, blockdev.Selector{Transport: "sas"}, "matches no disk (disks: nvme0n1, nvme1n1, sda)"},
		{"duplicate serial", append([]blockdev.Disk{{Name: "nvme2n1", Serial: "A", Transport: "nvme", SizeBytes: 1}}, disks...),
			blockdev.Selector{Transport: "nvme"}, `nvme2n1 and nvme0n1 share serial "A"`},
		{"no serial", []blockdev.Disk{{Name: "nvme0n1", Transport: "nvme", SizeBytes: 1}}, blockdev.Selector{Transport: "nvme"}, "reports no serial"},
		{"read-only", []blockdev.Disk{{Name: "nvme0n1", Serial: "A", Transport: "nvme", ReadOnly: true}}, blockdev.Selector{Transport: "nvme"}, "is read-only"},
		{"in use", []blockdev.Disk{{Name: "nvme0n1", Serial: "A", Transport: "nvme", Holders: []string{"md127"}}}, blockdev.Selector{Transport: "nvme"}, "in use by md127"},
		{"bad glob", disks, blockdev.Selector{Model: "["}, "syntax error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := SelectTargets(c.disks, c.sel)
			if err == nil || !strings.Contains(err.Error(), c.errHas) || got != nil {
				t.Fatalf("got %v err %v, want refusal containing %q", Names(got), err, c.errHas)
			}
		})
	}

	got, err := SelectTargets(disks, blockdev.Selector{Transport: "nvme", Model: "Data"})
	if err != nil || strings.Join(Names(got), ",") != "nvme0n1,nvme1n1" {
		t.Fatalf("got %v err %v", Names(got), err)
	}

}
