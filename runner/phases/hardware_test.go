package phases

import (
	"context"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/runner/inventory"
	"github.com/cure-oss/cure/runner/inventory/invtest"
)

// hwSKU matches invtest.Root: one socket, 4 GiB in DIMM slots A1/A2 (after
// SetDIMMs), the H100 at 0000:1b:00.0, one NVSwitch, a virtio port at
// 25 Gb/s and QEMU's NVMe.
const hwSKU = `apiVersion: cure.dev/v1
kind: SKU
metadata: {name: fixture-node}
spec:
  hardware:
    cpu: {model: "QEMU Virtual CPU*", sockets: 1}
    memory: {dimms: 2, dimmSize: 2GiB}
    gpus: {count: 1, model: "*H100*", addresses: ["0000:1b:00.0"]}
    nvswitches: {count: 1}
    nics:
      - {model: "Virtio network device", count: 1, speedMbps: 25000}
    nvme:
      - {model: "QEMU NVMe Ctrl", count: 1, minSize: 1GiB}
`

func hwRoot(t *testing.T) string {
	r := invtest.Root(t)
	invtest.SetDIMMs(t, r, []invtest.DIMM{{Locator: "A1", SizeMiB: 2048}, {Locator: "A2", SizeMiB: 2048}, {Locator: "B3"}})
	invtest.Write(t, r, "sys/class/net/ens3/speed", "25000\n")
	return r
}

func hwExecutor(t *testing.T, root string, linksUp *int) *Executor {
	return New(Config{Log: quiet(), Root: root,
		Inventory: CollectInventory(root, inventory.Options{Log: quiet(), NoIdentify: true,
			Links: func() ([]inventory.Link, error) {
				return []inventory.Link{{Name: "ens3", MAC: "52:54:00:12:34:56", Up: true}}, nil
			}}),
		LinksUp: func(ctx context.Context, wait time.Duration) (int, error) {
			*linksUp++
			if wait != time.Second {
				t.Errorf("link wait %s", wait)
			}
			return 0, nil
		},
		LinkWait: time.Second,
	})
}

func verdictsOf(em *recEmitter) map[string]string {
	out := map[string]string{}
	for _, v := range em.verdicts {
		out[v.Component] = v.Status.String() + " " + v.Message
	}
	return out
}

func TestHardwarePhase(t *testing.T) {
	provision := func(sku string) *curev1.Assignment {
		return &curev1.Assignment{RunId: "r", Mode: curev1.Mode_MODE_PROVISION, ManifestYaml: []byte(sku), ManifestName: "fixture-node.yaml"}
	}
	t.Run("matching node passes the gate", func(t *testing.T) {
		ups := 0
		em := &recEmitter{}
		out := hwExecutor(t, hwRoot(t), &ups).Run(context.Background(), "hardware", provision(hwSKU), em)
		if out.Status != curev1.PhaseStatus_PHASE_OK || !strings.Contains(out.Message, "matches SKU fixture-node") {
			t.Fatalf("outcome %+v; verdicts %v", out, verdictsOf(em))
		}
		for c, v := range verdictsOf(em) {
			if !strings.HasPrefix(v, "PASS") {
				t.Errorf("%s: %s", c, v)
			}
		}
		if len(em.verdicts) != 6 || ups != 1 {
			t.Errorf("%d verdicts, links raised %d times", len(em.verdicts), ups)
		}
	})
	t.Run("missing GPU, absent DIMM, slow NIC fail the gate naming each", func(t *testing.T) {
		r := hwRoot(t)
		invtest.SetDIMMs(t, r, []invtest.DIMM{{Locator: "A1", SizeMiB: 2048}, {Locator: "A2"}})
		invtest.Write(t, r, "sys/class/net/ens3/speed", "10000\n")
		sku := strings.Replace(hwSKU, `addresses: ["0000:1b:00.0"]`, `count: 2, addresses: ["0000:1b:00.0", "0000:c1:00.0"]`, 1)
		sku = strings.Replace(sku, "{count: 1, model", "{model", 1)
		em := &recEmitter{}
		ups := 0
		out := hwExecutor(t, r, &ups).Run(context.Background(), "hardware", provision(sku), em)
		if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "nothing was written") {
			t.Fatalf("outcome %+v", out)
		}
		v := verdictsOf(em)
		for comp, want := range map[string]string{
			"gpu/1":   "FAIL missing at PCI 0000:c1:00.0",
			"dimm/A2": "FAIL absent",
			"nic/0":   "FAIL link 10000 Mb/s, want 25000",
			"cpu":     "PASS",
		} {
			if !strings.HasPrefix(v[comp], want) {
				t.Errorf("%s = %q, want %q...", comp, v[comp], want)
			}
			if strings.HasPrefix(want, "FAIL") && !strings.Contains(out.Message, comp+" ") {
				t.Errorf("message does not name %s: %s", comp, out.Message)
			}
		}
	})
	t.Run("no SKU or no hardware section: skipped", func(t *testing.T) {
		ups := 0
		e := hwExecutor(t, hwRoot(t), &ups)
		diag := &curev1.Assignment{RunId: "r", Mode: curev1.Mode_MODE_DIAGNOSTIC, ManifestYaml: []byte(linkSuite)}
		if out := e.Run(context.Background(), "hardware", diag, &recEmitter{}); out.Status != curev1.PhaseStatus_PHASE_SKIPPED {
			t.Errorf("no sku: %+v", out)
		}
		bare := "apiVersion: cure.dev/v1\nkind: SKU\nmetadata: {name: bare}\nspec: {}\n"
		if out := e.Run(context.Background(), "hardware", provision(bare), &recEmitter{}); out.Status != curev1.PhaseStatus_PHASE_SKIPPED || !strings.Contains(out.Message, "bare") {
			t.Errorf("no hardware: %+v", out)
		}
		if ups != 0 {
			t.Errorf("links raised without NICs to check")
		}
		audit := &curev1.Assignment{RunId: "r", Mode: curev1.Mode_MODE_AUDIT, ManifestYaml: []byte(hwSKU)}
		if out := e.Run(context.Background(), "hardware", audit, &recEmitter{}); out.Status != curev1.PhaseStatus_PHASE_FAILED {
			t.Errorf("audit: %+v", out)
		}
	})
	t.Run("diagnostic: the suite runs, then the run fails on the mismatch", func(t *testing.T) {
		r := hwRoot(t)
		invtest.SetDIMMs(t, r, []invtest.DIMM{{Locator: "A1", SizeMiB: 2048}, {Locator: "A2"}})
		ups := 0
		e := hwExecutor(t, r, &ups)
		a := &curev1.Assignment{RunId: "r", Mode: curev1.Mode_MODE_DIAGNOSTIC, ManifestYaml: []byte(linkSuite), ManifestName: "links.yaml",
			SkuYaml: []byte(hwSKU), SkuName: "fixture-node.yaml"}
		em := &recEmitter{}
		out := e.Run(context.Background(), "hardware", a, em)
		if out.Status != curev1.PhaseStatus_PHASE_OK || !strings.Contains(out.Message, "dimm/A2 absent") {
			t.Fatalf("hardware outcome %+v", out)
		}
		// The link suite passes on this fixture (ens3 is up)...
		invtest.Write(t, r, "sys/class/net/ens3/operstate", "up\n")
		out = e.Run(context.Background(), "validate", a, em)
		// ...and the run fails on the hardware all the same.
		if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "hardware does not match the SKU: dimm/A2 absent") {
			t.Fatalf("validate outcome %+v", out)
		}
	})
}
