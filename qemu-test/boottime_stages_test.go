package qemutest

import (
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// The baseline's stages come from its console: kernel log lines (one behind
// SeaBIOS's escape codes) and the trivial init's line.
func TestBaselineStepsFromConsole(t *testing.T) {
	lines := []string{
		"Probing EDD (edd=off to disable)... oc\x1b[?7l\x1b[2J[    0.000000] Linux version 6.1.0-56-amd64",
		"[    1.118472] Trying to unpack rootfs image as initramfs...",
		"[    1.181372] Freeing initrd memory: 748K",
		"[    1.845631] Run /init as init process",
		"CURE-BASELINE-INIT uptime=1.91",
	}
	steps, ok := baselineSteps(lines)
	if !ok {
		t.Fatalf("baselineSteps not ok: %+v", steps)
	}
	if got := curev1.FormatBootSteps(steps); got != "initramfs_unpack_start=1.12s(+1.12s) initramfs_unpacked=1.18s(+0.06s) init_started=1.85s(+0.67s) hello_sent=1.91s(+0.06s)" {
		t.Fatalf("steps %s", got)
	}
	if _, ok := baselineSteps(lines[:4]); ok {
		t.Fatal("without the init's line the baseline must not count")
	}
}
