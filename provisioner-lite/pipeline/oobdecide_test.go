package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Every record an out-of-band update can be found in, crossed with what
// the inventory shows, has one next step; none of them sends the image
// again while a task of it may run.
func TestDecideUpdateTable(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	sub := func(s store.SubmissionState) store.FirmwareSubmission {
		return store.FirmwareSubmission{State: s, At: t0}
	}
	unread := updateObs{}
	drifted := updateObs{read: true}
	staged := updateObs{read: true, staged: true}
	done := updateObs{read: true, done: true}
	rebootedAfter := updateObs{read: true, bootRequestedAt: t0.Add(time.Second)}
	rebootedBefore := updateObs{read: true, bootRequestedAt: t0.Add(-time.Second)}
	for _, c := range []struct {
		name       string
		sub        store.FirmwareSubmission
		activation string
		obs        updateObs
		want       updateStep
	}{
		{"nothing sent, drifted", store.FirmwareSubmission{}, "bmc-reset", drifted, updSubmit},
		{"nothing sent, inventory unreadable", store.FirmwareSubmission{}, "bmc-reset", unread, updSubmit},
		{"nothing sent, staged by someone", store.FirmwareSubmission{}, "host-reboot", staged, updActivate},
		{"nothing sent, already running it", store.FirmwareSubmission{}, "host-reboot", done, updVerify},
		{"sending, nothing staged: trace the task", sub(store.SubmissionSending), "bmc-reset", drifted, updTrace},
		{"sending, unreadable: trace, never resend blind", sub(store.SubmissionSending), "bmc-reset", unread, updTrace},
		{"sending, staged: it took", sub(store.SubmissionSending), "bmc-reset", staged, updActivate},
		{"sending, running it: it took", sub(store.SubmissionSending), "", done, updVerify},
		{"accepted: follow", sub(store.SubmissionAccepted), "bmc-reset", drifted, updFollow},
		{"accepted, staged meanwhile: follow to the end", sub(store.SubmissionAccepted), "bmc-reset", staged, updFollow},
		{"accepted, running it meanwhile: follow to the end", sub(store.SubmissionAccepted), "", done, updFollow},
		{"accepted, unreadable: follow", sub(store.SubmissionAccepted), "", unread, updFollow},
		{"applied: activate", sub(store.SubmissionApplied), "host-reboot", staged, updActivate},
		{"applied, no activation: verify", sub(store.SubmissionApplied), "", staged, updVerify},
		{"applied, running it: verify", sub(store.SubmissionApplied), "bmc-reset", done, updVerify},
		{"activating reset: wait for it", sub(store.SubmissionActivating), "bmc-reset", staged, updAwaitActivation},
		{"activating reboot requested: wait for it", sub(store.SubmissionActivating), "host-reboot", rebootedAfter, updAwaitActivation},
		{"activating, reboot never requested: request it", sub(store.SubmissionActivating), "host-reboot", rebootedBefore, updActivate},
		{"activating, running it: verify", sub(store.SubmissionActivating), "host-reboot", done, updVerify},
		{"unknown state: refuse", sub("flashing"), "bmc-reset", drifted, updUnknown},
		{"unknown state, running it: still refuse", sub("flashing"), "", done, updUnknown},
	} {
		if got := decideUpdate(c.sub, c.activation, c.obs); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// A BIOS apply found staged reboots without writing again; one found
// rebooted waits, unless the reboot was never requested.
func TestDecideBIOSTable(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		apply  store.BIOSApply
		booted time.Time
		want   biosStep
	}{
		{"nothing recorded: compare", store.BIOSApply{}, t0, biosCompare},
		{"staged: reboot", store.BIOSApply{Stage: store.BIOSStaged, At: t0}, t0.Add(-time.Hour), biosReboot},
		{"rebooted: wait", store.BIOSApply{Stage: store.BIOSRebooted, At: t0}, t0.Add(time.Second), biosAwait},
		{"rebooted recorded, reboot not: reboot", store.BIOSApply{Stage: store.BIOSRebooted, At: t0}, t0.Add(-time.Second), biosReboot},
		{"unknown stage: refuse", store.BIOSApply{Stage: "applying", At: t0}, t0, biosUnknown},
	} {
		if got := decideBIOS(c.apply, c.booted); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// The scheduler wakes each requeue at its time, in time order, and one
// forgotten before its time never fires.
func TestSchedulerWakesInOrder(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newScheduler()
	go s.run(ctx)
	now := time.Now()
	late, _ := s.at(now.Add(300 * time.Millisecond))
	early, _ := s.at(now.Add(50 * time.Millisecond))
	gone, forget := s.at(now.Add(100 * time.Millisecond))
	forget()
	past, _ := s.at(now.Add(-time.Second))
	select {
	case <-past:
	case <-time.After(5 * time.Second):
		t.Fatal("a requeue already due did not fire")
	}
	select {
	case <-early:
	case <-late:
		t.Fatal("the later requeue fired first")
	case <-time.After(5 * time.Second):
		t.Fatal("the early requeue never fired")
	}
	select {
	case <-late:
	case <-time.After(5 * time.Second):
		t.Fatal("the late requeue never fired")
	}
	select {
	case <-gone:
		t.Fatal("a forgotten requeue fired")
	default:
	}
	if n := s.pending(); n != 0 {
		t.Errorf("%d requeues pending after all fired or were forgotten", n)
	}
}
