package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/timebuckets"
)

// A runner told to reboot out of CURE resets the machine without closing
// its stream, as a real node does. The coordinator ordered that reboot, so
// it ends the session itself once the runner has drained: the installed
// OS's first callback is accepted (no refused callback, no security event),
// and the reboot request is not charged with the time the network would
// take to notice the dead stream.
func TestRebootOutOfCUREEndsSession(t *testing.T) {
	f := newFixture(t, nil)
	f.rebootKeepsStream = true
	f.hostBootDelay = time.Second
	runID, err := f.eng.Start(context.Background(), "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run ended %s: %s", r.Status, r.Message)
	}
	ctx := context.Background()
	sec, err := f.st.AuditLog(ctx, store.AuditFilter{Kind: store.AuditSecurity, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range sec {
		t.Errorf("security event on a clean run: %s %s: %s", a.Action, a.Result, a.Detail)
	}
	phases, err := f.st.Phases(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	events, err := f.st.Events(ctx, runID, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	b := timebuckets.Compute(r, phases, events, time.Now())
	req, ok := b.Get(timebuckets.RebootRequest)
	if !ok {
		t.Fatalf("no %s bucket: %+v", timebuckets.RebootRequest, b.Buckets)
	}
	boot, _ := b.Get(timebuckets.OSBootCallback)
	// The fixture's ShutdownWait is 5 s: waiting for the stream to end on
	// its own would hit it and reset the node through the BMC.
	if req.Duration >= 5*time.Second || boot.Duration < f.hostBootDelay {
		t.Errorf("reboot_request %s, os_boot_to_callback %s: want the reboot order quick and the installed OS's %s boot in the second",
			req.Duration, boot.Duration, f.hostBootDelay)
	}
	if got := f.bmc.History(); len(got) != 2 {
		t.Errorf("boots %+v: want the power-on and the runner's own reboot (no BMC reset)", got)
	}
	// The reboot mark sits at the reboot, before the installed OS called back.
	marks := timebuckets.RebootTimes(phases, events)
	var ready time.Time
	for _, e := range events {
		if e.Kind == runstate.EventHostReady {
			ready = e.Time
		}
	}
	if len(marks) != 2 || !marks[1].Before(ready.Add(-f.hostBootDelay/2)) {
		t.Errorf("reboot marks %v, host ready at %v: want the second mark at the reboot, before the callback", marks, ready)
	}
}

// A SKU whose OS image is not in the artifact store fails preflight once,
// saying what to import: retrying cannot make the image appear.
func TestPreflightMissingImageNotRetried(t *testing.T) {
	f := newFixture(t, func(sku *manifests.SKU, _ string) {
		sku.Spec.OS.Image = manifests.Artifact{SHA256: strings.Repeat("ab", 32), Size: 1234, Format: "raw.zst"}
	})
	runID, err := f.eng.Start(context.Background(), "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	pre := f.phases(runID)[modes.Preflight]
	if r.Status != curev1.RunStatus_RUN_FAILED || pre.Attempts != 1 || !strings.Contains(r.Message, "os.image: sha256:"+strings.Repeat("ab", 32)+" not in the artifact store") ||
		!strings.Contains(r.Message, "provisioner-lite artifacts add") {
		t.Fatalf("run %s after %d preflight attempts: %s", r.Status, pre.Attempts, r.Message)
	}
	if n := f.bmc.SessionCount(); len(f.bmc.Overrides()) != 0 || n != 0 {
		t.Errorf("preflight failed on its inputs but the BMC saw %d overrides, %d sessions", len(f.bmc.Overrides()), n)
	}
}
