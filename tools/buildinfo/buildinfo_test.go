package buildinfo

import "testing"

func TestVersion(t *testing.T) {
	if got := Version("v1.2.3"); got != "v1.2.3" {
		t.Errorf("linked version: %q", got)
	}
	if got := Version(""); got == "" {
		t.Error("no version without a linked one: want the build info's or devel")
	}
}
