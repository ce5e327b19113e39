package pid1

import (
	"strings"
	"testing"
)

func TestMountedTargets(t *testing.T) {
	m := mountedTargets(strings.NewReader("proc /proc proc rw 0 0\nsysfs /sys sysfs rw 0 0\n"))
	if !m["/proc"] || !m["/sys"] || m["/dev"] {
		t.Fatalf("mountedTargets = %v", m)
	}
}
