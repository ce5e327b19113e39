package phases

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/gpucheck"
	"github.com/cure-oss/cure/tools/gpu/driver"
	"github.com/cure-oss/cure/tools/pci/pcitest"
)

// gpuSuite parses a one-check suite the way the validate phase does.
func gpuCheck(t *testing.T, body string) manifests.Check {
	t.Helper()
	s, err := manifests.ParseSuite("gpu.yaml", []byte("apiVersion: cure.dev/v1\nkind: ValidationSuite\nmetadata: {name: g}\nspec:\n  checks:\n"+body))
	if err != nil {
		t.Fatal(err)
	}
	return s.Spec.Checks[0]
}

// gpuNode is a sysfs fixture with the given PCI devices (addr -> vendor, class).
func gpuNode(t *testing.T, devs map[string][2]string) string {
	return pcitest.Devices(t, devs)
}

// On an HGX node whose image carries a driver bundle, the GPU check loads
// the bundle's modules in order and starts the fabric manager before the
// NVML helper runs, once per boot; a driver that fails to come up is an
// ERROR naming the step, retried by the next check.
func TestGPUDriverBeforeChecks(t *testing.T) {
	root := gpuNode(t, map[string][2]string{"0000:18:00.0": {"0x10de", "0x030200"}, "0000:05:00.0": {"0x10de", "0x068000"}})
	m := driver.Manifest{Version: "570.86.15", Modules: []string{"nvidia", "nvidia_uvm"}, FabricManager: "/usr/bin/nv-fabricmanager",
		FabricManagerArgs: []string{"-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg"}}
	b, _ := json.Marshal(m)
	os.MkdirAll(filepath.Join(root, "etc/cure"), 0o755)
	os.WriteFile(filepath.Join(root, driver.ManifestPath), b, 0o644)
	helper := filepath.Join(t.TempDir(), "cure-nvml")
	os.WriteFile(helper, nil, 0o755)

	var steps []string
	failFM := true
	e := New(Config{Log: quiet(), Root: root, GPUDriver: driver.Seams{
		Load: func(name string) error { steps = append(steps, "load "+name); return nil },
		Start: func(_ context.Context, path string, args ...string) error {
			steps = append(steps, "start "+path)
			if failFM {
				return errors.New("NVSwitch fabric not ready")
			}
			return nil
		}}})
	em := &recEmitter{}
	g := gpucheck.Checks{Helper: helper, Root: root, TmpDir: t.TempDir(), Log: quiet(), Prepare: e.gpuDriverUp(em),
		Exec: func(ctx context.Context, name string, args ...string) ([]byte, []byte, int, error) {
			steps = append(steps, "helper")
			return []byte(`{"driver": "570.86.15", "verdicts": [{"component": "gpu", "check": "count", "status": "PASS"}]}`), nil, 0, nil
		}}
	f, err := g.Build(gpuCheck(t, "    - {name: g, type: gpu}\n"))
	if err != nil {
		t.Fatal(err)
	}
	vs, err := f(context.Background())
	if err != nil || len(vs) != 1 || vs[0].Status != checks.Error || !strings.Contains(vs[0].Message, "NVSwitch fabric not ready") {
		t.Fatalf("fabric manager failing: %v %v", vs, err)
	}
	failFM = false
	if vs, err = f(context.Background()); err != nil || vs[0].Status != checks.Pass {
		t.Fatalf("second check: %v %v", vs, err)
	}
	if _, err = f(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The fixture's /proc never lists the modules, so the retry loads them
	// again; after success nothing is redone.
	want := "load nvidia|load nvidia_uvm|start /usr/bin/nv-fabricmanager|load nvidia|load nvidia_uvm|start /usr/bin/nv-fabricmanager|helper|helper"
	if got := strings.Join(steps, "|"); got != want {
		t.Errorf("steps %s\nwant  %s", got, want)
	}
	if em.logs == 0 {
		t.Error("driver steps not logged to the run")
	}
}
