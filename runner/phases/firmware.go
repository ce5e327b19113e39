package phases

import (
	"context"
	"fmt"
	"path"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/manifests/fwplan"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/runner/inventory"
	"github.com/cure-oss/cure/tools/mellanox"
	"github.com/cure-oss/cure/tools/pci"
)

// firmwareKind is one kind of firmware-bearing device the runner checks
// and updates in-band (nvme.go, nic.go, dpu.go): observe, match, label and
// judge (fwplan.Component), update. runFirmware is the phase around it,
// the same for every kind.
type firmwareKind[D any] interface {
	fwplan.Component[D]
	// words are the nouns of the phase messages.
	words() fwWords
	// entries are the SKU's entries this kind checks; when there are none
	// the phase is SKIPPED with the message none.
	entries(sku *manifests.SKU) (entries []manifests.Firmware, none string)
	// observe lists the devices. A non-nil outcome ends the phase there:
	// nothing to check, or no way to look.
	observe(ctx context.Context, entries []manifests.Firmware, emit agent.Emitter) ([]D, *agent.PhaseOutcome)
	// update brings one drifted device to its entry, whose artifact is
	// set, in a mode that flashes (provision, service; refuseUpdate
	// checked both). It returns the verdict (startUpdate's) and whether a
	// host reboot is needed before the new firmware runs.
	update(ctx context.Context, a *curev1.Assignment, c fwplan.Check[D], emit agent.Emitter) (*curev1.Verdict, bool)
}

// fwWords are the nouns one kind's phase messages use.
type fwWords struct {
	devices string // "controller(s)"
	pinned  string // "" or "pinned " before devices in the all-match message
	action  string // "update": nothing to <action>
	kind    string // "nvme firmware update": what applyUpdates names
	done    string // "updated"
}

// runFirmware is the phase of every firmware kind: plan (fwplan.Plan),
// stream a verdict per check, then, in a mode that flashes (provision,
// service), fail on any ERROR or update every DRIFT; in other modes
// report only.
func runFirmware[D any](ctx context.Context, e *Executor, k firmwareKind[D], a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	sku, err := e.sku(a)
	if err != nil {
		return failed("%s: %v", k.Kind(), err)
	}
	entries, none := k.entries(sku)
	if len(entries) == 0 {
		return skipped("%s", none)
	}
	devs, out := k.observe(ctx, entries, emit)
	if out != nil {
		return *out
	}
	if err := ctx.Err(); err != nil {
		return failed("%s: %v", k.Kind(), err)
	}
	checks := fwplan.Plan[D](k, entries, devs)
	js := make([]judged, 0, len(checks))
	for _, c := range checks {
		desired, exp := "", "" // a device no entry selects has no target
		if c.Entry != nil {
			desired, exp = c.Entry.Version, fwplan.Expected(c.Entry)
		}
		js = append(js, judged{&curev1.Verdict{Component: c.Component(k), Check: "firmware", Status: c.Status,
			Observed: c.Observed, Expected: exp, Message: c.Message}, desired})
	}
	drift, errs, nJudged := tally(emit, js)
	// Provision and service flash; the other modes report drift only.
	mode, _ := modes.FromProto(a.GetMode())
	provision := modes.FlashesFirmware(mode)
	w := k.words()
	if provision && len(errs) > 0 {
		return failed("%s: %s", k.Kind(), strings.Join(errs, "; "))
	}
	if provision && len(drift) > 0 {
		var ups []update
		for _, c := range checks {
			if c.Status == curev1.VerdictStatus_DRIFT {
				ups = append(ups, update{c.Component(k), func() (*curev1.Verdict, bool) {
					if v := refuseUpdate(k, a, c); v != nil {
						return v, false
					}
					return k.update(ctx, a, c, emit)
				}})
			}
		}
		return applyUpdates(w.kind, w.done, ups, emit)
	}
	if len(drift) == 0 && len(errs) == 0 {
		// Idempotence: a component already at the target is skipped, and
		// the timeline says so.
		return skipped("all %d %s%s match the manifest: nothing to %s", nJudged, w.pinned, w.devices, w.action)
	}
	msg := fmt.Sprintf("%d %s checked: %d drift, %d error", len(devs), w.devices, len(drift), len(errs))
	if len(drift) > 0 {
		msg += " (" + strings.Join(drift, ", ") + "; reported only in " + a.GetMode().String() + ")"
	}
	return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_OK, Message: msg}
}

// GateVerdict is the verdict the runner gives a component running version
// running against fw: fwplan.Gate, the judgement every kind of both sides
// makes (TestVersionFormsAgree holds it to the coordinator's).
func GateVerdict(fw manifests.Firmware, running string) (curev1.VerdictStatus, string) {
	j := fwplan.Gate(&fw, running)
	return j.Status, j.Message
}

// ConfirmVerdict is the verdict the runner gives a component running
// version running after its update: fwplan.Confirm, the judgement both
// sides make after a flash (TestOneFirmwarePlanner holds it to the
// coordinator's): a version the gate cannot read is an ERROR naming it.
func ConfirmVerdict(fw manifests.Firmware, running string) (curev1.VerdictStatus, string) {
	j := fwplan.Confirm(&fw, running)
	return j.Status, j.Message
}

// NVMeKind is the runner's NVMe kind, for tests that hold the runner's
// kinds and the coordinator's to the one planner.
func NVMeKind() fwplan.Component[*inventory.Controller] { return nvmeKind{} }

// refuseUpdate is what stops any kind's update before it starts: a mode
// that may not write firmware, an entry without an image. nil: go on.
func refuseUpdate[D any](k firmwareKind[D], a *curev1.Assignment, c fwplan.Check[D]) *curev1.Verdict {
	v, fail := startUpdate(k, c)
	mode, err := modes.FromProto(a.GetMode())
	if err != nil {
		v, _ = fail("%v", err)
		return v
	}
	if err := modes.CheckWrite(mode, k.words().kind); err != nil {
		v, _ = fail("%v", err)
		return v
	}
	if c.Entry.Artifact == nil {
		v, _ = fail("firmware entry %q drifted but names no artifact", c.Entry.Name)
		return v
	}
	return nil
}

// startUpdate is the firmware_update verdict of one device, to be filled
// by its kind's update, and fail, which fills it as a FAIL.
func startUpdate[D any](k fwplan.Component[D], c fwplan.Check[D]) (*curev1.Verdict, func(format string, args ...any) (*curev1.Verdict, bool)) {
	v := &curev1.Verdict{Component: k.Label(c.Device), Check: "firmware_update", Observed: c.Observed, Expected: fwplan.Expected(c.Entry)}
	return v, func(format string, args ...any) (*curev1.Verdict, bool) {
		v.Status = curev1.VerdictStatus_FAIL
		v.Message = fmt.Sprintf(format, args...)
		return v, false
	}
}

// matchMellanox applies a selector's vendorId to a Mellanox device (NIC
// or BlueField DPU: both carry the Mellanox vendor id).
func matchMellanox(m manifests.Match) (bool, error) {
	if m.VendorID == "" {
		return true, nil
	}
	v, err := pci.ParseVendorID(m.VendorID)
	if err != nil {
		return false, fmt.Errorf("match.vendorId: %w", err)
	}
	return v == mellanox.VendorID, nil
}

// matchModel applies a model glob to the names a device goes by; an
// empty glob matches, an empty name never does.
func matchModel(glob string, names ...string) (bool, error) {
	if glob == "" {
		return true, nil
	}
	hit := false
	for _, s := range names {
		if s == "" {
			continue
		}
		ok, err := path.Match(glob, s)
		if err != nil {
			return false, fmt.Errorf("match.model %q: %w", glob, err)
		}
		hit = hit || ok
	}
	return hit, nil
}

// orNone joins what was seen, or says none was.
func orNone(seen []string, none string) string {
	if len(seen) == 0 {
		return none
	}
	return strings.Join(seen, ", ")
}

func skipped(format string, args ...any) agent.PhaseOutcome {
	return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_SKIPPED, Message: fmt.Sprintf(format, args...)}
}
