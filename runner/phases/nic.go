package phases

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/manifests/fwplan"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/tools/mellanox"
	"github.com/cure-oss/cure/tools/mstflint"
)

// NICObservation is one adapter and what `mstflint query` said of it.
type NICObservation struct {
	Device mellanox.NIC
	Query  *mstflint.Query // nil when Err is set
	Err    error
}

// nicKind is the Mellanox/NVIDIA adapters' firmware, checked with
// mstflint and burnt in-band (PSID checked by mstflint before anything is
// written). Adapters no entry selects are SKIPs.
type nicKind struct {
	e *Executor
	// images are the downloaded image files by entry: eight fabric
	// adapters share one file. removeImages deletes them.
	images map[*manifests.Firmware]string
}

func (nicKind) Kind() string                  { return manifests.ComponentNIC }
func (nicKind) Label(o NICObservation) string { return "nic/" + o.Device.PCI }

func (nicKind) Broken(o NICObservation) string {
	if o.Err == nil {
		return ""
	}
	return fmt.Sprintf("%s: %v", o.Device, o.Err)
}

// Match applies vendorId, psid and the model glob (over the adapter's
// family, VPD part number and VPD name).
func (nicKind) Match(m manifests.Match, o NICObservation) (bool, string, error) {
	if ok, err := matchMellanox(m); !ok || err != nil {
		return false, "", err
	}
	if m.PSID != "" && !strings.EqualFold(m.PSID, o.Query.PSID) {
		return false, "", nil
	}
	ok, err := matchModel(m.Model, o.Device.Family, o.Device.PartNumber, o.Device.Name)
	return ok, "", err
}

func (nicKind) Judge(fw *manifests.Firmware, o NICObservation) fwplan.Judgement {
	j := fwplan.Gate(fw, o.Query.Running())
	if o.Query.PendingReset() {
		j.Message += fmt.Sprintf(" (flash holds %s, waiting for a reset)", o.Query.FWVersion)
	}
	j.Message = fmt.Sprintf("%s PSID %s: %s", o.Device, o.Query.PSID, j.Message)
	return j
}

func (nicKind) NoMatch(fw *manifests.Firmware, obs []NICObservation) string {
	var seen []string
	for _, o := range obs {
		if o.Query != nil {
			seen = append(seen, fmt.Sprintf("%s PSID %s", o.Device, o.Query.PSID))
		}
	}
	return fmt.Sprintf("firmware entry %q: no Mellanox adapter matches %s (adapters seen: %s)", fw.Name, fw.Match, orNone(seen, "none answered a query"))
}

func (nicKind) Unmatched(o NICObservation) (fwplan.Judgement, bool) {
	return fwplan.Judgement{Observed: o.Query.Running(),
		Message: fmt.Sprintf("%s PSID %s: no nic firmware entry selects this adapter", o.Device, o.Query.PSID)}, true
}

func (nicKind) words() fwWords {
	return fwWords{devices: "adapter(s)", pinned: "pinned ", action: "update", kind: "nic firmware update", done: "updated"}
}

func (nicKind) entries(sku *manifests.SKU) ([]manifests.Firmware, string) {
	return sku.FirmwareVia(manifests.ComponentNIC, manifests.ViaInBand), fmt.Sprintf("manifest %s pins no nic firmware (in-band): nothing to check", sku.Metadata.Name)
}

// observe lists the adapters and queries each; no adapter, or no usable
// mstflint, skips the phase (with a SKIP verdict per adapter for the latter).
func (k *nicKind) observe(ctx context.Context, entries []manifests.Firmware, emit agent.Emitter) ([]NICObservation, *agent.PhaseOutcome) {
	end := func(out agent.PhaseOutcome) ([]NICObservation, *agent.PhaseOutcome) { return nil, &out }
	devs, err := mellanox.FindNICs(k.e.cfg.Root)
	if err != nil {
		return end(failed("nic: listing Mellanox adapters: %v", err))
	}
	if len(devs) == 0 {
		return end(skipped("no Mellanox (PCI vendor 0x15b3) Ethernet/InfiniBand adapter on this node: %d nic firmware entr(y/ies) not checked", len(entries)))
	}
	mft := k.e.cfg.MFT
	if mft == nil {
		return end(skipped("runner has no mstflint tool configured: %d Mellanox adapter(s) not checked", len(devs)))
	}
	if err := mft.Available(); err != nil {
		reason := err.Error()
		var se *mstflint.SkipError
		if errors.As(err, &se) {
			reason = se.Reason
		}
		for _, d := range devs {
			emit.Verdict(&curev1.Verdict{Component: "nic/" + d.PCI, Check: "firmware", Status: curev1.VerdictStatus_SKIP, Message: reason})
		}
		return end(skipped("%s: %d Mellanox adapter(s) not checked", reason, len(devs)))
	}
	obs := make([]NICObservation, 0, len(devs))
	for _, d := range devs {
		q, err := mft.QueryDevice(ctx, d.PCI)
		obs = append(obs, NICObservation{Device: d, Query: q, Err: err})
	}
	return obs, nil
}

// update burns one adapter and verifies (mstflint checks the PSID and the
// image's version before writing, and the running version after a reset).
func (k *nicKind) update(ctx context.Context, a *curev1.Assignment, c fwplan.Check[NICObservation], _ agent.Emitter) (*curev1.Verdict, bool) {
	v, fail := startUpdate(k, c)
	fw, mft, pciAddr := c.Entry, k.e.cfg.MFT, c.Device.Device.PCI
	image, ok := k.images[fw]
	if !ok {
		url, err := ArtifactURL(*fw.Artifact, a.GetArtifactBaseUrl())
		if err != nil {
			return fail("%v", err)
		}
		image, err = fetchArtifactFile(ctx, k.e.cfg.HTTP, url, *fw.Artifact, k.e.cfg.TmpDir, maxFirmwareImage)
		if err != nil {
			return fail("%v", err)
		}
		k.images[fw] = image
	}
	act, note := nicActivation(fw.Activation, mft.CanReset())
	plan, res, err := mft.Update(ctx, pciAddr, image, fw.Version, act)
	if err != nil {
		var pm *mstflint.PSIDMismatchError
		if errors.As(err, &pm) {
			return fail("%s: nothing burnt: %v", fw.Name, err)
		}
		if res != nil && res.Burned {
			return fail("%s %s -> %s: burnt, then: %v", pciAddr, c.Observed, fw.Version, err)
		}
		return fail("%s %s -> %s: %v", pciAddr, c.Observed, fw.Version, err)
	}
	notes := append([]string{plan.String()}, res.Notes...)
	if note != "" {
		notes = append(notes, note)
	}
	switch {
	case plan.Noop():
		v.Status = curev1.VerdictStatus_PASS
		v.Message = "already running the image's version: " + strings.Join(notes, "; ")
		return v, false
	case res.Activated:
		v.Status = curev1.VerdictStatus_PASS
		v.Observed = res.Final.Running()
		v.Message = fmt.Sprintf("updated %s -> %s, running version verified after mstfwreset: %s", c.Observed, v.Observed, strings.Join(notes, "; "))
		return v, false
	case act == mstflint.ActivateNone:
		// The manifest asks for no activation: the image runs after
		// whatever reboot comes next; CURE does not force one.
		v.Status = curev1.VerdictStatus_DRIFT
		v.Message = fmt.Sprintf("%s on flash; activation none: runs after the next reboot: %s", plan.ImageVersion, strings.Join(notes, "; "))
		return v, false
	default:
		v.Status = curev1.VerdictStatus_DRIFT
		v.Message = fmt.Sprintf("%s on flash, verified; activates at the next reboot: %s", plan.ImageVersion, strings.Join(notes, "; "))
		return v, true
	}
}

func (k *nicKind) removeImages() {
	for _, p := range k.images {
		os.Remove(p)
	}
}

// runNIC reports a verdict per Mellanox adapter and, in provision and
// service modes, burns the manifest's image on drifted ones.
func (e *Executor) runNIC(ctx context.Context, a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	k := &nicKind{e: e, images: map[*manifests.Firmware]string{}}
	defer k.removeImages()
	return runFirmware[NICObservation](ctx, e, k, a, emit)
}

// nicActivation maps the manifest's activation onto mstflint's. An image
// without mstfwreset cannot reset the adapter, so a reset becomes a reboot.
func nicActivation(activation string, haveReset bool) (mstflint.Activation, string) {
	switch activation {
	case manifests.ActivationHostReboot:
		return mstflint.ActivateReboot, ""
	case manifests.ActivationNone:
		return mstflint.ActivateNone, ""
	default: // mstfwreset, or unset: a reset where possible, else a reboot
		if !haveReset {
			return mstflint.ActivateReboot, "mstfwreset is not in this image: a host reboot activates the image"
		}
		return mstflint.ActivateReset, ""
	}
}
