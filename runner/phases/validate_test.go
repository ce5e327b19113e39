package phases

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/checks"
)

const linkSuite = `apiVersion: cure.dev/v1
kind: ValidationSuite
metadata:
  name: links
spec:
  duration: 1m
  checks:
    - name: ethernet-links
      type: ethernet
      appliesTo: "nic/*"
      thresholds:
        operstate: {equals: up}
`

func nicFixture(t *testing.T, oper map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, state := range oper {
		d := filepath.Join(root, "sys/class/net", name)
		for f, v := range map[string]string{"type": "1", "operstate": state, "speed": "100000", "duplex": "full", "device/vendor": "0x15b3"} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(d, f)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, f), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func TestValidatePhase(t *testing.T) {
	a := func(mode curev1.Mode) *curev1.Assignment {
		return &curev1.Assignment{RunId: "r", Mode: mode, ManifestYaml: []byte(linkSuite), ManifestName: "links.yaml"}
	}
	t.Run("every sub-component gets a verdict; a down link fails naming it", func(t *testing.T) {
		e := New(Config{Log: quiet(), Root: nicFixture(t, map[string]string{"eth0": "up", "eth1": "down"})})
		em := &recEmitter{}
		out := e.Run(context.Background(), "validate", a(curev1.Mode_MODE_DIAGNOSTIC), em)
		if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "nic/eth1") || strings.Contains(out.Message, "nic/eth0") {
			t.Fatalf("outcome %+v", out)
		}
		got := map[string]curev1.VerdictStatus{}
		for _, v := range em.verdicts {
			got[v.Component] = v.Status
		}
		if got["nic/eth0"] != curev1.VerdictStatus_PASS || got["nic/eth1"] != curev1.VerdictStatus_FAIL {
			t.Errorf("verdicts %v", em.verdicts)
		}
		if em.logs == 0 {
			t.Error("no progress logs streamed")
		}
	})
	t.Run("healthy links pass", func(t *testing.T) {
		e := New(Config{Log: quiet(), Root: nicFixture(t, map[string]string{"eth0": "up"})})
		if out := e.Run(context.Background(), "validate", a(curev1.Mode_MODE_BURNIN), &recEmitter{}); out.Status != curev1.PhaseStatus_PHASE_OK {
			t.Fatalf("outcome %+v", out)
		}
	})
	t.Run("only diagnostic and burn-in validate; a SKU is not a suite", func(t *testing.T) {
		e := New(Config{Log: quiet(), Root: t.TempDir()})
		if out := e.Run(context.Background(), "validate", a(curev1.Mode_MODE_PROVISION), &recEmitter{}); out.Status != curev1.PhaseStatus_PHASE_FAILED {
			t.Errorf("provision: %+v", out)
		}
		sku := assignment(t, curev1.Mode_MODE_DIAGNOSTIC, manifest(t))
		if out := e.Run(context.Background(), "validate", sku, &recEmitter{}); out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "not a ValidationSuite") {
			t.Errorf("sku: %+v", out)
		}
	})
}

// TestValidateFailsOnCheckThatTestedNothing: the validate phase fails on a
// check that tested nothing (an InfiniBand check on a node without IB); the
// same suite marking it optional passes, its SKIP verdict giving the reason.
func TestValidateFailsOnCheckThatTestedNothing(t *testing.T) {
	suite := func(optional string) *curev1.Assignment {
		return &curev1.Assignment{RunId: "r", Mode: curev1.Mode_MODE_DIAGNOSTIC, ManifestName: "ib.yaml",
			ManifestYaml: []byte(linkSuite + "    - name: ib-ports\n      type: infiniband\n      appliesTo: \"ib/*/*\"\n" + optional)}
	}
	e := New(Config{Log: quiet(), Root: nicFixture(t, map[string]string{"eth0": "up"})})
	em := &recEmitter{}
	out := e.Run(context.Background(), "validate", suite(""), em)
	if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "failing: infiniband ib-ports") {
		t.Errorf("not optional: outcome %+v, want failed on ib-ports", out)
	}
	em = &recEmitter{}
	out = e.Run(context.Background(), "validate", suite("      optional: {reason: \"no InfiniBand on this node\"}\n"), em)
	if out.Status != curev1.PhaseStatus_PHASE_OK {
		t.Errorf("optional: outcome %+v, want OK", out)
	}
	found := 0
	for _, v := range em.verdicts {
		if v.GetCheck() != "ib-ports" {
			continue
		}
		found++
		if v.GetStatus() != curev1.VerdictStatus_SKIP || !strings.HasPrefix(v.GetMessage(), "optional: no InfiniBand on this node") {
			t.Errorf("optional ib-ports verdict %v", v)
		}
	}
	if found != 1 {
		t.Errorf("%d ib-ports verdicts, want 1: %v", found, em.verdicts)
	}
}

// TestVerdictMeasurementsOnTheWire: a check's measured numbers travel with
// its verdict, in order, with their units.
func TestVerdictMeasurementsOnTheWire(t *testing.T) {
	got := protoMeasurements([]checks.Measurement{{Metric: "readMBps", Value: 41.5, Unit: "MB/s"}, {Metric: "writeMBps", Value: 12, Unit: "MB/s"}})
	if len(got) != 2 || got[0].GetMetric() != "readMBps" || got[0].GetValue() != 41.5 || got[0].GetUnit() != "MB/s" || got[1].GetMetric() != "writeMBps" {
		t.Errorf("measurements %v", got)
	}
	if protoMeasurements(nil) != nil {
		t.Error("no measurements became some")
	}
}
