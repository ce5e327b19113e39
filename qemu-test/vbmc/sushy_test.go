package vbmc

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Ironic's Redfish client (Debian's python3-sushy, installed by
// scripts/install-deps.sh) passes every probe against the virtual BMC: a
// second, independent client keeps the BMC honest beyond what gofish checks.
func TestSushyProbes(t *testing.T) {
	const py = "/usr/bin/python3" // Debian's: the PATH one is another build
	if err := exec.Command(py, "-c", "import sushy").Run(); err != nil {
		t.Skipf("python3-sushy is not installed (scripts/install-deps.sh installs it): %v", err)
	}
	b, _ := newFakeBMC(t, Config{Name: "n1"})
	srv, err := Listen("127.0.0.1:0", b, false) // plain HTTP: sushy verifies against the system CA store
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "testdata/sushy_probe.py", srv.URL, "admin", "password").CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("sushy probes failed: %v", err)
	}
	pass := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "PASS ") {
			pass++
		}
	}
	if pass != 18 {
		t.Fatalf("%d probes passed, want all 18", pass)
	}
}
