package phases

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/runner/inventory"
	"github.com/cure-oss/cure/tools/nvme"
	"github.com/cure-oss/cure/tools/nvmefw"
	"github.com/cure-oss/cure/tools/nvmefw/nvmefwtest"
)

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// driftManifest pins version want with an artifact served at srv.
func driftManifest(t *testing.T, image []byte, want string) []byte {
	t.Helper()
	sum := sha256.Sum256(image)
	y := string(manifest(t))
	y = strings.Replace(y, `version: "7.2.22"`, fmt.Sprintf("version: %q", want), 1)
	y = strings.Replace(y, "sha256: 70dc61be9e56ec72ddd6634d72353a2f94841db5c8040499bd97817182028156", "sha256: "+hex.EncodeToString(sum[:]), 1)
	y = strings.Replace(y, "size: 65536", fmt.Sprintf("size: %d", len(image)), 1)
	return []byte(y)
}

func serveArtifact(t *testing.T, image []byte) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sum := sha256.Sum256(image)
		if !strings.HasSuffix(r.URL.Path, "/sha256/"+hex.EncodeToString(sum[:])) {
			http.NotFound(w, r)
			return
		}
		w.Write(image)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestNVMeDriftUpdatesThroughAdminCommands(t *testing.T) {
	ctrl := &nvmefwtest.Controller{Model: "QEMU NVMe Ctrl", Serial: "deadbeef", NumSlots: 2, ActivateNow: true}
	ctrl.Slots[0] = "7.2.22"
	ctrl.Active = 1
	image := nvmefwtest.Image("8.0.1", 64<<10)
	srv := serveArtifact(t, image)
	e := New(Config{Log: quiet(),
		Controllers: func() ([]*inventory.Controller, error) {
			c := qemuCtrl(0, ctrl.Running())
			c.Info.DevPath = "/dev/nvme0"
			return []*inventory.Controller{c}, nil
		},
		OpenNVMeFirmware: func(dev string) (nvme.Admin, nvmefw.Resetter, io.Closer, error) {
			if dev != "/dev/nvme0" {
				t.Errorf("opened %s", dev)
			}
			return ctrl, ctrl, nopCloser{}, nil
		},
	})
	a := assignment(t, curev1.Mode_MODE_PROVISION, driftManifest(t, image, "8.0.1"))
	a.ArtifactBaseUrl = srv.URL + "/artifacts/"
	em := &recEmitter{}
	out := e.Run(context.Background(), "nvme", a, em)
	if out.Status != curev1.PhaseStatus_PHASE_OK || out.RebootRequired {
		t.Fatalf("outcome %+v", out)
	}
	if got := ctrl.Running(); got != "8.0.1" {
		t.Fatalf("controller runs %q after the update", got)
	}
	if len(em.verdicts) != 2 || em.verdicts[0].Status != curev1.VerdictStatus_DRIFT ||
		em.verdicts[1].Check != "firmware_update" || em.verdicts[1].Status != curev1.VerdictStatus_PASS || em.verdicts[1].Observed != "8.0.1" {
		t.Errorf("verdicts %v", em.verdicts)
	}

	// The same phase in audit mode reports the drift and never flashes.
	ctrl2 := &nvmefwtest.Controller{Model: "QEMU NVMe Ctrl", NumSlots: 2, ActivateNow: true}
	ctrl2.Slots[0], ctrl2.Active = "7.2.22", 1
	e.cfg.OpenNVMeFirmware = func(string) (nvme.Admin, nvmefw.Resetter, io.Closer, error) {
		t.Error("audit mode opened a controller for a firmware update")
		return ctrl2, ctrl2, nopCloser{}, nil
	}
	e.cfg.Controllers = func() ([]*inventory.Controller, error) { return []*inventory.Controller{qemuCtrl(0, "7.2.22")}, nil }
	a.Mode = curev1.Mode_MODE_AUDIT
	if out := e.Run(context.Background(), "nvme", a, &recEmitter{}); out.Status != curev1.PhaseStatus_PHASE_OK {
		t.Errorf("audit outcome %+v", out)
	}
}

// QEMU's controller rejects Firmware Download with Invalid Command Opcode:
// the phase must fail with a verdict carrying that status.
type rejectingAdmin struct{ inner *nvmefwtest.Controller }

func (r rejectingAdmin) AdminCommand(c *nvme.Command) (uint32, error) {
	if c.Opcode == 0x11 || c.Opcode == 0x10 {
		return 0, nvme.ParseStatus(c.Opcode, 0x4001)
	}
	return r.inner.AdminCommand(c)
}

func TestNVMeDriftRejectedCarriesStatus(t *testing.T) {
	ctrl := &nvmefwtest.Controller{Model: "QEMU NVMe Ctrl", NumSlots: 1, Slot1RO: true, NoFirmwareCmd: true}
	ctrl.Slots[0], ctrl.Active = "7.2.22", 1
	image := nvmefwtest.Image("8.0.1", 8<<10)
	srv := serveArtifact(t, image)
	e := New(Config{Log: quiet(),
		Controllers: func() ([]*inventory.Controller, error) {
			c := qemuCtrl(0, "7.2.22")
			c.Info.DevPath = "/dev/nvme0"
			return []*inventory.Controller{c}, nil
		},
		OpenNVMeFirmware: func(string) (nvme.Admin, nvmefw.Resetter, io.Closer, error) {
			return rejectingAdmin{ctrl}, ctrl, nopCloser{}, nil
		},
	})
	a := assignment(t, curev1.Mode_MODE_PROVISION, driftManifest(t, image, "8.0.1"))
	a.ArtifactBaseUrl = srv.URL + "/artifacts/"
	em := &recEmitter{}
	out := e.Run(context.Background(), "nvme", a, em)
	if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "0x4001") {
		t.Fatalf("outcome %+v, want FAILED carrying status 0x4001", out)
	}
	last := em.verdicts[len(em.verdicts)-1]
	if last.Status != curev1.VerdictStatus_FAIL || !strings.Contains(last.Message, "Invalid Command Opcode") {
		t.Errorf("verdict %v", last)
	}
}

func TestFetchArtifactRejectsCorruption(t *testing.T) {
	image := nvmefwtest.Image("8.0.1", 4096)
	srv := serveArtifact(t, image)
	sum := sha256.Sum256(image)
	y := driftManifest(t, image, "8.0.1")
	sku, err := (&Executor{}).sku(assignment(t, curev1.Mode_MODE_PROVISION, y))
	if err != nil {
		t.Fatal(err)
	}
	art := *sku.Spec.Firmware[0].Artifact
	url := srv.URL + "/artifacts/sha256/" + hex.EncodeToString(sum[:])
	if _, err := fetchArtifact(context.Background(), http.DefaultClient, url, art); err != nil {
		t.Fatalf("good artifact: %v", err)
	}
	bad := art
	bad.SHA256 = strings.Repeat("0", 64)
	if _, err := fetchArtifact(context.Background(), http.DefaultClient, url, bad); err == nil || !strings.Contains(err.Error(), "sha256 mismatch") {
		t.Errorf("wrong hash: %v", err)
	}
	bad = art
	bad.Size++
	if _, err := fetchArtifact(context.Background(), http.DefaultClient, url, bad); err == nil || !strings.Contains(err.Error(), "size: expected") {
		t.Errorf("wrong size: %v", err)
	}
}
