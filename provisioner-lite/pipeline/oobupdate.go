package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// An out-of-band update is reconciled from its typed record in the run's
// status (store.FirmwareSubmission): each step looks at the BMC, decides
// from the record and the look (decideUpdate, pure), does one thing and
// records where it got before the next look. A coordinator that stops at
// any point (mid-request, mid-task, mid-activation) finds the record and
// follows the task it names: the image is never sent twice for one
// submission.

// updateStep is what an out-of-band update does next.
type updateStep int

const (
	updSubmit          updateStep = iota // send the image: nothing of this update reached the BMC
	updTrace                             // a request whose answer was not recorded: find the task it created
	updFollow                            // follow the accepted update's task to its end
	updActivate                          // request the activation (BMC reset, host reboot)
	updAwaitActivation                   // the activation was requested: wait for it, never request again
	updVerify                            // read back every target's running version
	updUnknown                           // a record state this coordinator does not know: refuse, never guess
)

var updateStepNames = [...]string{updSubmit: "submit", updTrace: "trace", updFollow: "follow", updActivate: "activate",
	updAwaitActivation: "await_activation", updVerify: "verify", updUnknown: "unknown"}

func (s updateStep) String() string {
	if int(s) < len(updateStepNames) {
		return updateStepNames[s]
	}
	return fmt.Sprintf("update_step(%d)", int(s))
}

// updateObs is one look at the BMC for an update: whether the targets run
// the desired version or have it staged (read: the inventory answered).
type updateObs struct {
	read, done, staged bool
	// bootRequestedAt is the run's last recorded reboot request.
	bootRequestedAt time.Time
}

// decideUpdate is the next step of an update from its record and a look.
func decideUpdate(sub store.FirmwareSubmission, activation string, obs updateObs) updateStep {
	switch sub.State {
	case "", store.SubmissionSending, store.SubmissionAccepted, store.SubmissionApplied, store.SubmissionActivating:
	default:
		return updUnknown // a newer coordinator's record, or a damaged one
	}
	if sub.State == store.SubmissionAccepted {
		// A task in flight is followed to its end whatever the inventory
		// says meanwhile.
		return updFollow
	}
	if obs.read && obs.done {
		return updVerify
	}
	step := updActivate
	switch sub.State {
	case store.SubmissionAccepted:
		return updFollow // decided above
	case "":
		if !obs.staged {
			return updSubmit
		}
	case store.SubmissionSending:
		if !obs.staged {
			return updTrace
		}
	case store.SubmissionApplied:
	case store.SubmissionActivating:
		step = updAwaitActivation
		if activation == "host-reboot" && obs.bootRequestedAt.Before(sub.At) {
			// Recorded, then stopped before the reboot was: request it.
			step = updActivate
		}
	}
	if activation == "" {
		return updVerify // nothing to activate: it runs once applied
	}
	return step
}

// maxUpdateSteps bounds one update's looks: each step moves the record on.
const maxUpdateSteps = 8

// applyOOB pushes one manifest entry's image to its drifted members,
// activates it and verifies, step by step from its stored record.
func (o *oobCtl) applyOOB(ctx context.Context, r *store.Run, component string, d oobDelta) outcome {
	fw := d.fw
	if fw.Artifact == nil {
		return failed("%s drifted but names no artifact", fw.Name)
	}
	if err := modes.CheckWrite(r.Mode, component+" firmware update"); err != nil {
		return failed("%v", err)
	}
	var targets []string
	for _, t := range d.targets {
		targets = append(targets, t.ID)
	}
	u := &oobUpdate{o: o, r: r, component: component, phase: modes.PhaseName(component), fw: fw, targets: targets}
	for range maxUpdateSteps {
		sub := r.Pipeline.Submission(fw.Name)
		step := decideUpdate(sub, fw.Activation, u.observe(ctx))
		if sub.State != "" {
			o.cfg.Log.Debug("out-of-band update", "run", r.ID, "firmware", fw.Name, "record", sub.State, "step", step)
		}
		if step == updVerify {
			return u.verify(ctx)
		}
		if out, end := u.do(ctx, step, sub); end {
			return out
		}
	}
	return failed("%s: no progress after %d steps (record %s)", fw.Name, maxUpdateSteps, r.Pipeline.Submission(fw.Name).State)
}

// oobUpdate is one manifest entry's update of one run.
type oobUpdate struct {
	o         *oobCtl
	r         *store.Run
	component string
	// phase is the phase its events belong to: the one named as the
	// component (oobPhase passes its name).
	phase   modes.PhaseName
	fw      manifests.Firmware
	targets []string
}

// observe reads the inventory: whether the targets run the desired
// version, or have it staged for the next activation. An unreadable one is
// neither (read false).
func (u *oobUpdate) observe(ctx context.Context) updateObs {
	obs := updateObs{bootRequestedAt: u.r.Pipeline.BootRequestedAt}
	inv, err := u.o.firmwareInventory(ctx, u.r)
	if err != nil {
		return obs
	}
	done, staged, err := stagedState(&u.fw, verifyMembers(inv, u.fw, u.targets))
	if err != nil {
		return obs
	}
	obs.read, obs.done, obs.staged = true, done, staged
	return obs
}

// do carries out one step; end says the attempt ended with out.
func (u *oobUpdate) do(ctx context.Context, step updateStep, sub store.FirmwareSubmission) (out outcome, end bool) {
	var err error
	switch step {
	case updSubmit:
		err = u.submit(ctx)
	case updTrace:
		err = u.trace(ctx, sub)
	case updFollow:
		err = u.follow(ctx, sub)
	case updActivate:
		err = u.activate(ctx)
	case updAwaitActivation:
		return u.awaitActivation(ctx)
	case updVerify:
		return u.verify(ctx), true
	case updUnknown:
		return failed("%s: update record in state %q, unknown to this coordinator: not acted on (an operator looks)", u.fw.Name, sub.State), true
	default:
		panic(fmt.Sprintf("pipeline: update step %s has no applier", step))
	}
	if err != nil {
		return failed("%s: %v", u.fw.Name, err), true
	}
	return outcome{}, false
}

// record saves the update's new record with the run's status.
func (u *oobUpdate) record(ctx context.Context, sub store.FirmwareSubmission) {
	sub.At = time.Now().UTC()
	u.r.Pipeline.SetSubmission(u.fw.Name, sub)
	u.o.save(ctx, u.r)
}

// submit sends the image. The BMC's task list is recorded first, with the
// record "sending": whoever finds that record later tells the task this
// request created from the tasks that were there.
func (u *oobUpdate) submit(ctx context.Context) error {
	imageURI := u.fw.Artifact.URL
	if imageURI == "" {
		imageURI = strings.TrimRight(u.o.bmcBaseURL(), "/") + "/artifacts/sha256/" + u.fw.Artifact.SHA256
	}
	casPath := filepath.Join(u.o.cfg.ArtifactDir, "sha256", u.fw.Artifact.SHA256)
	u.o.firmwareChanged(ctx, u.r, fmt.Sprintf("%s firmware update %s", u.component, u.fw.Name))
	return u.o.power.withBMCFor(ctx, u.r, 4*u.o.cfg.Timeouts.BMCCall, func(ctx context.Context, b BMC) error {
		caps, err := b.UpdateService(ctx)
		if err != nil {
			return err
		}
		sub := store.FirmwareSubmission{State: store.SubmissionSending}
		sub.KnownTasks, sub.TasksListed = b.KnownTasks(ctx)
		var send func() (*redfish.Job, error)
		switch {
		case caps.SimpleUpdateFetches(imageURI):
			// The BMC pulls from the artifact server: nothing streams
			// through the coordinator.
			sub.Op, sub.URI = "SimpleUpdate", caps.SimpleUpdateURI
			send = func() (*redfish.Job, error) { return b.SimpleUpdate(ctx, imageURI, u.targets, "") }
		case caps.MultipartPushURI != "":
			sub.Op, sub.URI = "MultipartPush", caps.MultipartPushURI
			send = func() (*redfish.Job, error) {
				f, err := os.Open(casPath)
				if err != nil {
					return nil, fmt.Errorf("multipart push needs the image locally: %w", err)
				}
				defer f.Close()
				return b.MultipartPush(ctx, f, u.fw.Artifact.Size, u.targets)
			}
		default:
			return fmt.Errorf("BMC offers neither a SimpleUpdate that can fetch %s (TransferProtocols %v) nor MultipartHttpPushUri", imageURI, caps.TransferProtocols)
		}
		u.record(ctx, sub)
		job, err := send()
		var ue *redfish.UnknownOutcomeError
		if errors.As(err, &ue) {
			u.o.coordEvent(ctx, *u.r, u.phase, runstate.EventLog, "WARN", fmt.Sprintf("%s: update submission outcome unknown (%v); searching the BMC's tasks before any retry", u.fw.Name, err), 0)
			job, err = b.RecoverJob(ctx, ue)
			if err == nil && job == nil {
				return fmt.Errorf("submission was not taken by the BMC (no new task): safe to retry")
			}
		}
		if err != nil {
			return err
		}
		u.accepted(ctx, sub, job)
		return nil
	})
}

// accepted records the task the BMC gave the update.
func (u *oobUpdate) accepted(ctx context.Context, sub store.FirmwareSubmission, job *redfish.Job) {
	sub.State, sub.TaskURI, sub.MonitorURI = store.SubmissionAccepted, job.TaskURI, job.MonitorURI
	sub.KnownTasks, sub.TasksListed = nil, false
	u.record(ctx, sub)
	u.o.coordEvent(ctx, *u.r, u.phase, runstate.EventInfo, "", fmt.Sprintf("%s: update accepted: task %s", u.fw.Name, nonEmpty(job.TaskURI, job.MonitorURI)), 0)
}

// trace finds the task a request whose answer was not recorded created
// (the coordinator stopped, or the answer was lost). None means the
// request did not take: the record is dropped and the next step submits.
func (u *oobUpdate) trace(ctx context.Context, sub store.FirmwareSubmission) error {
	return u.o.power.withBMC(ctx, u.r, func(ctx context.Context, b BMC) error {
		job, err := b.RecoverJob(ctx, &redfish.UnknownOutcomeError{Op: sub.Op, URI: sub.URI, KnownTasks: sub.KnownTasks, TasksListed: sub.TasksListed})
		if err != nil {
			return fmt.Errorf("earlier submission (%s at %s): its task cannot be traced: %w", sub.Op, sub.At.Format(time.RFC3339), err)
		}
		if job != nil {
			u.o.coordEvent(ctx, *u.r, u.phase, runstate.EventInfo, "", fmt.Sprintf("%s: earlier submission traced to task %s: following it, not submitting again", u.fw.Name, job.TaskURI), 0)
			u.accepted(ctx, sub, job)
			return nil
		}
		u.o.coordEvent(ctx, *u.r, u.phase, runstate.EventLog, "WARN", fmt.Sprintf("%s: earlier submission (%s at %s) left no task and nothing staged: submitting", u.fw.Name, sub.Op, sub.At.Format(time.RFC3339)), 0)
		u.r.Pipeline.SetSubmission(u.fw.Name, store.FirmwareSubmission{})
		u.o.save(ctx, u.r)
		return nil
	})
}

// follow waits for the accepted update's task. A task that failed drops
// the record (a later attempt submits again, knowing the first did not
// take); one that vanished is judged from the inventory it left.
func (u *oobUpdate) follow(ctx context.Context, sub store.FirmwareSubmission) error {
	// The task's budget runs from when the BMC accepted it (stored), not
	// from this look: a coordinator that restarts mid-task does not
	// extend it.
	deadline := sub.At.Add(u.o.cfg.Timeouts.BMCTask)
	if sub.At.IsZero() {
		deadline = time.Now().Add(u.o.cfg.Timeouts.BMCTask) // an older coordinator's record kept no time
	}
	if !time.Now().Before(deadline) {
		// The record stays: the task may still run, and sending the image
		// again beside it is what must never happen. An operator looks.
		return fmt.Errorf("task %s did not end within %s of its acceptance at %s", nonEmpty(sub.TaskURI, sub.MonitorURI), u.o.cfg.Timeouts.BMCTask, sub.At.Format(time.RFC3339))
	}
	var res *redfish.TaskResult
	err := u.o.power.withBMCFor(ctx, u.r, time.Until(deadline)+u.o.cfg.Timeouts.BMCCall, func(ctx context.Context, b BMC) error {
		var err error
		res, err = b.WaitTask(ctx, &redfish.Job{Op: sub.Op, TaskURI: sub.TaskURI, MonitorURI: sub.MonitorURI}, u.o.cfg.Timeouts.TaskPoll)
		return err
	})
	if ctx.Err() != nil {
		return fmt.Errorf("stopped while following task %s", nonEmpty(sub.TaskURI, sub.MonitorURI))
	}
	if errors.Is(err, redfish.ErrTaskFailed) {
		u.r.Pipeline.SetSubmission(u.fw.Name, store.FirmwareSubmission{})
		u.o.save(ctx, u.r)
		return err
	}
	if err != nil {
		return err // the record stays: the next attempt follows the same task
	}
	if res.State == redfish.TaskGone {
		done, staged, serr := stagedState(&u.fw, verifyMembers(res.Inventory, u.fw, u.targets))
		if serr != nil || !(done || staged) {
			u.r.Pipeline.SetSubmission(u.fw.Name, store.FirmwareSubmission{})
			u.o.save(ctx, u.r)
			return fmt.Errorf("task %s vanished and the targets neither run nor stage %s", res.TaskURI, u.fw.Version)
		}
	}
	u.o.coordEvent(ctx, *u.r, u.phase, runstate.EventInfo, "", fmt.Sprintf("%s: update task %s (%s)", u.fw.Name, res.State, strings.Join(res.Messages, "; ")), 0)
	sub.State = store.SubmissionApplied
	u.record(ctx, sub)
	return nil
}

// activate requests the activation, recording it first (with the BMC's
// reset time, for a reset) so a coordinator that stops meanwhile waits for
// it instead of requesting it again.
func (u *oobUpdate) activate(ctx context.Context) error {
	sub := u.r.Pipeline.Submission(u.fw.Name)
	sub.State = store.SubmissionActivating
	switch u.fw.Activation {
	case "bmc-reset":
		u.r.Pipeline.BMC.ResetAt = time.Now().UTC()
		u.record(ctx, sub)
		err := u.o.power.withBMCFor(ctx, u.r, 4*u.o.cfg.Timeouts.BMCCall+u.o.cfg.Timeouts.BMCReset, func(ctx context.Context, b BMC) error {
			if err := b.ResetManager(ctx, "GracefulRestart"); err != nil {
				return err
			}
			// The BMC's own budget: it is gone for minutes on real hardware.
			return b.WaitBMC(ctx, u.o.cfg.Timeouts.BMCReset)
		})
		if err != nil {
			return fmt.Errorf("BMC reset to activate: %w", err)
		}
		u.r.Pipeline.BMC.ResetAt = time.Time{}
		u.r.Pipeline.BMC.Resets++
		u.o.save(ctx, u.r)
	case "host-reboot":
		u.record(ctx, sub)
		if err := u.o.power.rebootIntoCURE(ctx, u.r, u.fw.Name+" activates on host reboot"); err != nil {
			return err
		}
	}
	return nil
}

// awaitActivation waits for an activation requested earlier: the BMC back
// from its reset (withBMC waits for a recorded reset), or a runner of the
// run that connected after the recorded reboot; then verifies.
func (u *oobUpdate) awaitActivation(ctx context.Context) (outcome, bool) {
	if u.fw.Activation == "host-reboot" {
		if out := u.o.waitForNewCURE(ctx, u.r); out.status == curev1.PhaseStatus_PHASE_FAILED {
			return out, true
		}
	}
	return u.verify(ctx), true
}

// verify reads back every target's running version; the record is done
// with either way.
func (u *oobUpdate) verify(ctx context.Context) outcome {
	inv, err := u.o.firmwareInventory(ctx, u.r)
	if err != nil {
		return failed("%s: read back FirmwareInventory: %v", u.fw.Name, err)
	}
	rows, bad := confirmOOB(u.component, &u.fw, inv, u.targets)
	for _, row := range rows {
		u.o.verdict(ctx, u.r, row.component, "firmware_update", row.status, row.observed, row.expected, row.msg)
	}
	u.r.Pipeline.SetSubmission(u.fw.Name, store.FirmwareSubmission{})
	u.o.save(ctx, u.r)
	if len(bad) > 0 {
		return failed("%s: %s", u.fw.Name, strings.Join(bad, "; "))
	}
	return ok("%s: %d updated to %s (%s)", u.fw.Name, len(rows), u.fw.Version, nonEmpty(u.fw.Activation, "no activation"))
}
