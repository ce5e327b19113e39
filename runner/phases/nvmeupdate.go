package phases

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/manifests/fwplan"
	"github.com/cure-oss/cure/runner/inventory"
	"github.com/cure-oss/cure/tools/artifact"
	"github.com/cure-oss/cure/tools/nvme"
	"github.com/cure-oss/cure/tools/nvmefw"
)

// maxFirmwareImage bounds an in-band firmware image held in RAM: NVMe and
// NIC images are tens of MiB; anything larger is not a firmware image.
const maxFirmwareImage = 256 << 20

// NVMeFirmwareDevice opens a controller for a firmware update: its admin
// queue, its reset ioctls, and a closer.
type NVMeFirmwareDevice func(devPath string) (nvme.Admin, nvmefw.Resetter, io.Closer, error)

// OpenNVMeFirmwareDevice is the real one: /dev/nvmeX through the admin ioctl.
func OpenNVMeFirmwareDevice(devPath string) (nvme.Admin, nvmefw.Resetter, io.Closer, error) {
	d, err := nvme.Open(devPath)
	if err != nil {
		return nil, nil, nil, err
	}
	return d, nvmefw.DeviceResetter{Path: devPath}, d, nil
}

// fetchArtifact downloads a small artifact into memory, checking size and
// sha256 before anyone uses a byte of it.
func fetchArtifact(ctx context.Context, c *http.Client, url string, art manifests.Artifact) ([]byte, error) {
	return artifact.Fetcher{Client: c, Timeout: 10 * time.Minute, Limit: maxFirmwareImage}.Bytes(ctx, url, wantOf(art))
}

// fetchArtifactFile downloads an artifact into a new file under dir (tmpfs
// in CURE), checking size and sha256 before returning its path; on any
// error the file is removed. Tools that take a path (mstflint -i) and
// images too large for a []byte go through here.
func fetchArtifactFile(ctx context.Context, c *http.Client, url string, art manifests.Artifact, dir string, limit int64) (string, error) {
	return artifact.Fetcher{Client: c, Timeout: 30 * time.Minute, Limit: limit}.File(ctx, url, wantOf(art), dir, "cure-artifact-*."+formatExt(art.Format))
}

func wantOf(a manifests.Artifact) artifact.Want { return artifact.Want{Size: a.Size, SHA256: a.SHA256} }

func formatExt(f string) string {
	if f == "" {
		return "bin"
	}
	return f
}

// updateNVMe flashes one drifted controller and verifies the running
// revision. It returns the verdict to report and whether a host reboot is
// needed before the new firmware runs.
func (e *Executor) updateNVMe(ctx context.Context, a *curev1.Assignment, c fwplan.Check[*inventory.Controller]) (*curev1.Verdict, bool) {
	ctrl := c.Device
	v, fail := startUpdate(nvmeKind{}, c)
	if e.cfg.OpenNVMeFirmware == nil {
		return fail("runner has no NVMe firmware device opener configured")
	}
	url, err := ArtifactURL(*c.Entry.Artifact, a.GetArtifactBaseUrl())
	if err != nil {
		return fail("%v", err)
	}
	image, err := fetchArtifact(ctx, e.cfg.HTTP, url, *c.Entry.Artifact)
	if err != nil {
		return fail("%v", err)
	}
	admin, resetter, closer, err := e.cfg.OpenNVMeFirmware(ctrl.Info.DevPath)
	if err != nil {
		return fail("open %s: %v", ctrl.Info.DevPath, err)
	}
	defer closer.Close()
	rep, err := nvmefw.Update(ctx, admin, resetter, c.Entry.Version, image, nvmefw.UpdateOptions{
		// Controllers that do not declare firmware support still get the
		// commands: the controller's own status is the evidence an
		// operator needs (QEMU answers Invalid Command Opcode).
		Plan: nvmefw.Options{AllowUndeclared: true},
		Log:  e.cfg.Log,
	})
	if err != nil {
		var se *nvme.StatusError
		if errors.As(err, &se) {
			return fail("%s %s -> %s: controller refused: %v", ctrl.Info.Name, c.Observed, c.Entry.Version, err)
		}
		return fail("%s %s -> %s: %v", ctrl.Info.Name, c.Observed, c.Entry.Version, err)
	}
	if rep.RebootRequired {
		v.Status = curev1.VerdictStatus_DRIFT
		v.Message = fmt.Sprintf("image %s committed to slot %d; activates at the next reboot", c.Entry.Version, rep.Result.Slot)
		return v, true
	}
	v.Status = curev1.VerdictStatus_PASS
	if rep.Final != nil {
		v.Observed = rep.Final.FR
	}
	v.Message = fmt.Sprintf("updated %s -> %s (slot %d), running revision verified", c.Observed, v.Observed, rep.Result.Slot)
	return v, false
}
