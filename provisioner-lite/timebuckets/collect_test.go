package timebuckets

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// longRun is a provision run's timeline drowned in a soak's runner
// metrics and logs: n events, of which a fixed few are what the buckets
// read (the boot's and reboots' notes, and one install stage reported
// again and again).
func longRun(n int) (store.Run, []store.Phase, []store.Event) {
	run := store.Run{ID: "r1", NodeID: "n1", Mode: "provision", Status: curev1.RunStatus_RUN_SUCCEEDED, StartedAt: at(0), EndedAt: at(1000)}
	phases := []store.Phase{
		ph(modes.Preflight, 2, 3, 1, "ok"), ph(modes.SetBootPXE, 3, 4, 1, "ok"), ph(modes.PoweringOn, 4, 5, 1, "ok"),
		ph(modes.WaitForCURE, 5, 105, 1, "ok"), ph(modes.BIOS, 106, 306, 1, "ok"), ph(modes.OSInstall, 400, 700, 2, "ok"),
		ph(modes.SetBootDisk, 700, 701, 1, "ok"), ph(modes.WaitForHostOS, 701, 990, 1, "ok"),
	}
	evs := []store.Event{
		info(modes.WaitForCURE, 35, "iPXE script served to 10.0.2.15 from ..."),
		info(modes.WaitForCURE, 100, "runner connected from 10.0.2.15: state=IDLE boot_id=b guest_uptime=40000ms mac=m"),
		info(modes.BIOS, 150, msgReboot+": bios activates on host reboot"),
	}
	for i := len(evs); i < n-2; i++ {
		s := 400 + 300*float64(i)/float64(n)
		switch i % 4 {
		case 0:
			evs = append(evs, store.Event{Source: "runner", Kind: "metric", Phase: modes.OSInstall, Time: at(s),
				Message: fmt.Sprintf("%s=%ds disk=nvme0n1 stage=write", StageMetric, 1+i%200)})
		case 1:
			evs = append(evs, store.Event{Source: "runner", Kind: "metric", Phase: modes.OSInstall, Time: at(s), Message: "os_install.throughput=512MB/s"})
		default:
			evs = append(evs, store.Event{Source: "runner", Kind: "log", Phase: modes.OSInstall, Time: at(s), Message: "writing", Payload: bytes.Repeat([]byte("x"), 200)})
		}
	}
	evs = append(evs,
		store.Event{Source: "runner", Kind: "metric", Phase: modes.OSInstall, Time: at(699), Message: StageMetric + "=-1s stage=write"}, // refused
		info(modes.WaitForHostOS, 711, msgHostReboot+": runner rebooted itself"))
	for i := range evs {
		evs[i].RunID, evs[i].NodeID = run.ID, run.NodeID
	}
	return run, phases, evs
}

// A run with 10,000 events, read from the store a page at a time, leaves
// the collector holding 5 of them, and the buckets are those of the whole
// timeline.
func TestRunEventsBounded(t *testing.T) {
	run, phases, evs := longRun(10_000)
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"), store.WithStateKey(bytes.Repeat([]byte{5}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if err := st.UpsertNode(ctx, store.Node{ID: run.NodeID, MACs: []string{"52:54:00:00:00:01"}}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	// Appended by 32 writers, so that the store's group commit makes few
	// durable writes of them (one at a time takes seconds).
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < len(evs); i += 32 {
				if _, _, err := st.AppendEvent(ctx, evs[i]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	all, err := st.Events(ctx, run.ID, 0, 0) // the whole timeline, as the readers read it before
	if err != nil || len(all) != len(evs) {
		t.Fatalf("stored %d events, %v", len(all), err)
	}
	var c Collector
	pages, seen, held := 0, 0, 0
	err = st.ScanEvents(ctx, run.ID, 1000, func(e store.Event) error {
		if seen%1000 == 0 {
			pages++
		}
		seen++
		c.Add(e)
		held = max(held, c.Len())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != len(evs) || pages != 10 {
		t.Fatalf("scanned %d events in %d pages, want %d in 10", seen, pages, len(evs))
	}
	if held > 5 {
		t.Fatalf("the collector held up to %d events of %d, want at most 5 (4 notes, 1 install stage)", held, len(evs))
	}
	kept, err := RunEvents(ctx, st, run.ID)
	if err != nil || len(kept) != c.Len() {
		t.Fatalf("RunEvents = %d events, %v; want %d", len(kept), err, c.Len())
	}
	want := Compute(run, phases, all, time.Time{})
	if got := Compute(run, phases, kept, time.Time{}); !reflect.DeepEqual(got, want) {
		t.Fatalf("buckets from the kept events:\n%+v\nfrom all:\n%+v", got.Buckets, want.Buckets)
	}
	if g, ok := want.Get(ImageWrite); !ok || g.Duration == 0 {
		t.Fatalf("the fixture's install stage is not in the buckets: %+v", want.Buckets)
	}
	if got, want := RebootTimes(phases, kept), RebootTimes(phases, all); !reflect.DeepEqual(got, want) {
		t.Fatalf("reboot times %v, want %v", got, want)
	}
	for _, e := range kept {
		if e.Payload != nil || (e.Kind != runstate.EventInfo && e.Kind != runstate.EventMetric) {
			t.Fatalf("kept %+v", e)
		}
	}
}
