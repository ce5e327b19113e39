package phases

import (
	"context"
	"fmt"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/runner/fwplan"
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
	// update brings one drifted device to its entry (provision and service
	// modes only, modes.CheckWrite; it refuses in any other). It returns the verdict and whether a host
	// reboot is needed before the new firmware runs.
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
			desired, exp = c.Entry.Version, expected(*c.Entry)
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
				ups = append(ups, update{c.Component(k), func() (*curev1.Verdict, bool) { return k.update(ctx, a, c, emit) }})
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

// gate decides MATCH, DRIFT or ERROR for a running version: ERROR when the
// manifest's gate cannot order the versions (an unparseable value under
// at-least, different families), never a silent DRIFT.
func gate(fw manifests.Firmware, running string) (curev1.VerdictStatus, string) {
	ok, err := fw.Satisfied(running)
	switch {
	case err != nil:
		return curev1.VerdictStatus_ERROR, err.Error()
	case ok && fw.Gate == manifests.GateAtLeast:
		return curev1.VerdictStatus_MATCH, fmt.Sprintf("running %s is at least %s", running, fw.Version)
	case ok:
		return curev1.VerdictStatus_MATCH, "running version equals desired"
	case fw.Gate == manifests.GateAtLeast:
		return curev1.VerdictStatus_DRIFT, fmt.Sprintf("running %s is older than %s", running, fw.Version)
	}
	return curev1.VerdictStatus_DRIFT, fmt.Sprintf("running %s, desired %s", running, fw.Version)
}

// GateVerdict is the verdict the runner gives a component running version
// running against fw (TestVersionFormsAgree holds it to the coordinator's).
func GateVerdict(fw manifests.Firmware, running string) (curev1.VerdictStatus, string) {
	return gate(fw, running)
}

func expected(fw manifests.Firmware) string {
	if fw.Gate == manifests.GateAtLeast {
		return ">= " + fw.Version
	}
	return fw.Version
}

func gateStatus(fw manifests.Firmware, running string) curev1.VerdictStatus {
	s, _ := gate(fw, running)
	return s
}

// inBand keeps the entries of one component the runner updates in-band;
// via redfish they are the coordinator's.
func inBand(sku *manifests.SKU, component string) []manifests.Firmware {
	var out []manifests.Firmware
	for _, f := range sku.FirmwareFor(component) {
		if f.Via == manifests.ViaInBand {
			out = append(out, f)
		}
	}
	return out
}

func skipped(format string, args ...any) agent.PhaseOutcome {
	return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_SKIPPED, Message: fmt.Sprintf(format, args...)}
}
