package coordinator

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFleetRetentionCoversSuiteWindows: the fleet retention is raised to
// the longest fleet window of a suite that names bands; suites without
// bands, a longer retention and "forever" are left alone.
func TestFleetRetentionCoversSuiteWindows(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "suites"), 0o755); err != nil {
		t.Fatal(err)
	}
	suite := func(name, fleet, band string) {
		y := "apiVersion: cure.dev/v1\nkind: ValidationSuite\nmetadata:\n  name: " + name + "\nspec:\n" + fleet +
			"  checks:\n    - name: disk-read\n      type: storage-throughput\n      thresholds:\n        readMBps: {min: 1}\n" + band
		if err := os.WriteFile(filepath.Join(dir, "suites", name+".yaml"), []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	suite("long", "  fleet: {window: 2400h}\n", "      fleet:\n        readMBps: {below: 3}\n")
	suite("unbanded", "  fleet: {window: 9000h}\n", "")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	names := []string{"long", "unbanded", "missing"}
	if got := fleetRetention(24*time.Hour, dir, names, log); got != 2400*time.Hour {
		t.Errorf("retention %s, want the banded suite's 2400h", got)
	}
	if got := fleetRetention(9999*time.Hour, dir, names, log); got != 9999*time.Hour {
		t.Errorf("a longer retention became %s", got)
	}
	if got := fleetRetention(0, dir, names, log); got != 0 {
		t.Errorf("forever became %s", got)
	}
}
