package phases

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/manifests/fwplan"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/tools/bluefield"
)

// maxBundle bounds a downloaded BlueField bundle: BFBs carrying a full OS
// are 1-2 GiB and are staged in RAM (tmpfs) so their sha256 is checked
// before the first byte reaches the DPU.
const maxBundle = 4 << 30

// DPUObservation is one DPU as the host sees it through rshim (and, for
// a PCIe rshim, its NIC firmware through mstflint).
type DPUObservation struct {
	Rshim  bluefield.Rshim
	Status *bluefield.Status // nil when Err is set
	// NICErr says why Status.NIC is nil (USB rshim, no mstflint, query failed).
	NICErr error
	Err    error // misc unreadable
}

// Name is the rshim directory's base name (rshim0).
func (o DPUObservation) Name() string { return filepath.Base(o.Rshim.Name()) }

var nicFWVersion = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

// dpuObserved picks what the manifest's version is compared with. A
// version of three numbers ("32.43.1014") is the DPU's NIC firmware as
// mstflint reads it; anything else ("4.9.1.13442") is the BlueField BSP,
// read from a "BlueField BSP version:" line in the rshim log. what names
// the source; observed is "" when the host cannot see it.
func dpuObserved(want string, o *DPUObservation) (observed, what string) {
	if nicFWVersion.MatchString(strings.TrimSpace(want)) {
		if o.Status.NIC == nil {
			return "", fmt.Sprintf("DPU NIC firmware (%v)", o.NICErr)
		}
		return o.Status.NIC.Running(), "DPU NIC firmware"
	}
	if o.Status.Versions.BSP == "" {
		return "", "BlueField BSP version (no \"BlueField BSP version:\" line in the rshim log)"
	}
	return o.Status.Versions.BSP, "BlueField BSP version"
}

// judgeDPU gates one DPU against its entry.
func judgeDPU(fw *manifests.Firmware, o *DPUObservation) fwplan.Judgement {
	observed, what := dpuObserved(fw.Version, o)
	j := fwplan.Judgement{Observed: observed}
	if observed == "" {
		// Installing a bundle again is harmless; skipping a needed one is not.
		j.Status = curev1.VerdictStatus_DRIFT
		j.Message = fmt.Sprintf("%s: %s not observable from the host; want %s", dpuLabel(o), what, fwplan.Expected(fw))
	} else {
		j = fwplan.Gate(fw, observed)
		j.Message = fmt.Sprintf("%s: %s %s", dpuLabel(o), what, j.Message)
	}
	if o.Status.State == bluefield.StateFailed {
		j.Status = curev1.VerdictStatus_DRIFT
		j.Message += "; the DPU's boot log reports a failure"
	}
	return j
}

func dpuLabel(o *DPUObservation) string {
	m := o.Status.Misc
	s := fmt.Sprintf("%s %s %s", o.Rshim.Name(), m.DevInfo, m.Fields["OPN_STR"])
	if o.Status.NIC != nil {
		s += " PSID " + o.Status.NIC.PSID
	}
	return strings.Join(strings.Fields(s), " ")
}

// matchDPU applies vendorId, psid and the model glob (over DEV_INFO and
// OPN_STR). undecided is set when the selector needs the PSID and the host
// could not read it.
func matchDPU(m manifests.Match, o *DPUObservation) (ok bool, undecided string, err error) {
	// Every rshim device is a BlueField: the Mellanox vendor id.
	if ok, err := matchMellanox(m); !ok || err != nil {
		return false, "", err
	}
	if ok, err := matchModel(m.Model, o.Status.Misc.DevInfo, o.Status.Misc.Fields["OPN_STR"]); !ok || err != nil {
		return false, "", err
	}
	if m.PSID != "" {
		if o.Status.NIC == nil {
			return false, fmt.Sprintf("%s: match.psid %s: cannot read the DPU's PSID: %v", o.Rshim.Name(), m.PSID, o.NICErr), nil
		}
		if !strings.EqualFold(m.PSID, o.Status.NIC.PSID) {
			return false, "", nil
		}
	}
	return true, "", nil
}

// dpuKind is the BlueField DPUs, seen through rshim (and, on PCIe, their
// NIC firmware through mstflint), installed with a bundle streamed into
// rshim. DPUs no entry selects are SKIPs.
type dpuKind struct{ e *Executor }

func (dpuKind) Kind() string                   { return manifests.ComponentDPU }
func (dpuKind) Label(o *DPUObservation) string { return "dpu/" + o.Name() }

func (dpuKind) Broken(o *DPUObservation) string {
	if o.Err == nil {
		return ""
	}
	return fmt.Sprintf("%s: %v", o.Rshim.Name(), o.Err)
}

func (dpuKind) Match(m manifests.Match, o *DPUObservation) (bool, string, error) {
	return matchDPU(m, o)
}
func (dpuKind) Judge(fw *manifests.Firmware, o *DPUObservation) fwplan.Judgement {
	return judgeDPU(fw, o)
}

func (dpuKind) NoMatch(fw *manifests.Firmware, obs []*DPUObservation) string {
	var seen []string
	for _, o := range obs {
		if o.Status != nil {
			seen = append(seen, dpuLabel(o))
		}
	}
	return fmt.Sprintf("firmware entry %q: no DPU matches %s (DPUs seen: %s)", fw.Name, fw.Match, strings.Join(seen, ", "))
}

func (dpuKind) Unmatched(o *DPUObservation) (fwplan.Judgement, bool) {
	return fwplan.Judgement{Message: dpuLabel(o) + ": no dpu firmware entry selects this DPU"}, true
}

func (dpuKind) words() fwWords {
	return fwWords{devices: "DPU(s)", pinned: "pinned ", action: "install", kind: "dpu bundle install", done: "installed"}
}

func (dpuKind) entries(sku *manifests.SKU) ([]manifests.Firmware, string) {
	return sku.FirmwareVia(manifests.ComponentDPU, manifests.ViaInBand), fmt.Sprintf("manifest %s pins no dpu firmware (in-band): nothing to check", sku.Metadata.Name)
}

func (k dpuKind) observe(ctx context.Context, entries []manifests.Firmware, _ agent.Emitter) ([]*DPUObservation, *agent.PhaseOutcome) {
	end := func(out agent.PhaseOutcome) ([]*DPUObservation, *agent.PhaseOutcome) { return nil, &out }
	e := k.e
	if e.cfg.Rshims == nil {
		return end(skipped("runner has no rshim device source configured: %d dpu firmware entr(y/ies) not checked", len(entries)))
	}
	rs, err := e.cfg.Rshims()
	if err != nil {
		return end(failed("dpu: %v", err))
	}
	if len(rs) == 0 {
		return end(skipped("no BlueField rshim device under %s (no DPU, or the rshim driver is not running): %d dpu firmware entr(y/ies) not checked",
			filepath.Join(e.cfg.Root, "dev/rshim*"), len(entries)))
	}
	obs := make([]*DPUObservation, 0, len(rs))
	for _, r := range rs {
		o := e.observeDPU(ctx, r)
		obs = append(obs, &o)
	}
	return obs, nil
}

func (k dpuKind) update(ctx context.Context, a *curev1.Assignment, c fwplan.Check[*DPUObservation], emit agent.Emitter) (*curev1.Verdict, bool) {
	return k.e.installDPU(ctx, a, c, emit)
}

// observeDPU reads misc (read-only: the display level is left as found)
// and the DPU's NIC firmware when it sits on PCIe and mstflint is here.
func (e *Executor) observeDPU(ctx context.Context, r bluefield.Rshim) DPUObservation {
	o := DPUObservation{Rshim: r}
	st, err := bluefield.Query(ctx, r, nil)
	if err != nil {
		o.Err = err
		return o
	}
	o.Status = st
	pci := st.Misc.PCI()
	switch {
	case pci == "":
		o.NICErr = fmt.Errorf("rshim DEV_NAME %q is not a PCIe function: NIC firmware not readable from this host", st.Misc.DevName)
	case e.cfg.MFT == nil:
		o.NICErr = errors.New("runner has no mstflint tool configured")
	default:
		if err := e.cfg.MFT.Available(); err != nil {
			o.NICErr = err
		} else if q, err := e.cfg.MFT.QueryDevice(ctx, pci); err != nil {
			o.NICErr = err
		} else {
			st.NIC = q
		}
	}
	return o
}

// runDPU reports a verdict per DPU and, in provision and service modes, installs the
// manifest's bundle on drifted ones through rshim.
func (e *Executor) runDPU(ctx context.Context, a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	return runFirmware(ctx, e, dpuKind{e}, a, emit)
}

// installDPU streams the bundle into one DPU, waits for it to report
// ready, activates per the entry and verifies what the host can see.
func (e *Executor) installDPU(ctx context.Context, a *curev1.Assignment, c fwplan.Check[*DPUObservation], emit agent.Emitter) (*curev1.Verdict, bool) {
	v, fail := startUpdate(dpuKind{}, c)
	component := v.Component
	fw, r := c.Entry, c.Device.Rshim
	if f := fw.Artifact.Format; f != "" && f != "bfb" {
		return fail("firmware entry %q: artifact format %q: a DPU takes a BlueField bundle (format bfb)", fw.Name, f)
	}
	url, err := ArtifactURL(*fw.Artifact, a.GetArtifactBaseUrl())
	if err != nil {
		return fail("%v", err)
	}
	file, err := fetchArtifactFile(ctx, e.cfg.HTTP, url, *fw.Artifact, e.cfg.TmpDir, maxBundle)
	if err != nil {
		return fail("%v", err)
	}
	defer os.Remove(file)
	f, err := os.Open(file)
	if err != nil {
		return fail("%v", err)
	}
	defer f.Close()

	labels := map[string]string{"component": component}
	last := e.cfg.now()
	progress := func(written, total int64) {
		if now := e.cfg.now(); now.Sub(last) >= e.cfg.ProgressEvery || written == total {
			last = now
			emit.Metric("dpu_install.written", float64(written), "bytes", labels)
		}
	}
	ictx, cancel := context.WithTimeout(ctx, e.cfg.DPUTimeout)
	defer cancel()
	e.cfg.Log.Info("installing DPU bundle", "rshim", r.Name(), "url", url, "bytes", fw.Artifact.Size)
	lines, err := bluefield.Install(ictx, r, f, fw.Artifact.Size, progress, bluefield.WaitOptions{Poll: e.cfg.DPUPoll, Log: e.cfg.Log})
	if err != nil {
		return fail("%v", err)
	}

	var notes []string
	after := e.observeDPU(ctx, r)
	if after.Err != nil {
		return fail("bundle installed, DPU reported ready, but rshim cannot be read back: %v", after.Err)
	}
	if after.Status.Versions.BSP == "" {
		// The install log may carry the version lines the misc file lacks.
		after.Status.Versions = bluefield.ParseVersions([]byte(strings.Join(lines, "\n")))
	}
	pci := after.Status.Misc.PCI()
	reboot := fw.Activation == manifests.ActivationHostReboot
	if nic := after.Status.NIC; fw.Activation == manifests.ActivationMstfwreset && nic != nil && nic.PendingReset() {
		if err := e.cfg.MFT.Reset(ctx, pci); err != nil {
			reboot = true
			notes = append(notes, "mstfwreset failed, reboot required: "+err.Error())
		} else {
			after = e.observeDPU(ctx, r)
			if after.Err != nil {
				return fail("after mstfwreset %s: %v", pci, after.Err)
			}
		}
	}
	j := judgeDPU(fw, &after)
	v.Observed = j.Observed
	if j.Observed != "" {
		if st, msg := ConfirmVerdict(*fw, j.Observed); st == curev1.VerdictStatus_ERROR {
			v.Status, v.Message = st, fmt.Sprintf("bundle installed and the DPU reported ready; %s: %s", dpuLabel(&after), msg)
			return v, false
		}
	}
	an := after.Status.NIC
	switch {
	case j.Status == curev1.VerdictStatus_MATCH:
		v.Status = curev1.VerdictStatus_PASS
		v.Message = "bundle installed, DPU ready; " + j.Message
		reboot = false // what the manifest wants already runs
	case j.Observed == "" && after.Status.State != bluefield.StateFailed:
		v.Status = curev1.VerdictStatus_PASS
		v.Message = "bundle installed and the DPU reported ready; not verified: " + j.Message
	case an != nil && an.PendingReset() && fwplan.Gate(fw, an.FWVersion).Status == curev1.VerdictStatus_MATCH:
		// The bundle burnt the NIC firmware; only its activation is missing.
		v.Status = curev1.VerdictStatus_DRIFT
		if fw.Activation == manifests.ActivationNone {
			v.Message = fmt.Sprintf("bundle installed; DPU NIC flash holds %s, running %s; activation none: runs after the next reboot", an.FWVersion, j.Observed)
		} else {
			v.Message = fmt.Sprintf("bundle installed; DPU NIC flash holds %s, running %s: activates at the next reboot", an.FWVersion, j.Observed)
			reboot = true
		}
	default:
		return fail("bundle installed and the DPU reported ready, but: %s", j.Message)
	}
	if len(notes) > 0 {
		v.Message += "; " + strings.Join(notes, "; ")
	}
	return v, reboot
}
