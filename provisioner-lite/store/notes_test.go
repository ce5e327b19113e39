package store

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

func note(run, msg string) Event {
	return Event{RunID: run, NodeID: "n1", Source: runstate.SourceCoordinator, Kind: runstate.EventInfo, Message: msg, Note: true, Time: time.Now()}
}

// Notes are capped per run: past the cap one notice says so and the rest
// are counted; the essential timeline is not capped; notes go with
// retention, the essential timeline stays.
func TestCoordinatorNotesCapped(t *testing.T) {
	s, _ := openTest(t, WithMaxNotes(3))
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	runningRun(t, s, "r1")
	if _, _, err := s.AppendEvent(ctx, Event{RunID: "r1", Source: runstate.SourceRunner, Kind: "info", Note: true}); err == nil {
		t.Fatal("a runner-source note was accepted")
	}
	if _, _, err := s.AppendEvent(ctx, Event{RunID: "r1", Source: runstate.SourceCoordinator, Kind: runstate.EventInfo, Message: "run created"}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		_, inserted, err := s.AppendEvent(ctx, note("r1", fmt.Sprintf("runner re-attached %d", i)))
		if err != nil || inserted != (i < 3) {
			t.Fatalf("note %d: inserted=%t %v", i, inserted, err)
		}
	}
	if _, inserted, err := s.AppendEvent(ctx, Event{RunID: "r1", Source: runstate.SourceCoordinator, Kind: runstate.EventPhaseStart, Phase: "nvme"}); err != nil || !inserted {
		t.Fatalf("essential event past the notes cap: %t %v", inserted, err)
	}
	evs, err := s.Events(ctx, "r1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var notes, notices int
	for _, e := range evs {
		if e.Note {
			notes++
		}
		if strings.Contains(e.Message, "notes cap reached (3 notes)") {
			notices++
		}
	}
	if len(evs) != 1+3+1+1 || notes != 4 || notices != 1 {
		t.Fatalf("stored %d events (%d notes, %d cap notices), want run created, 3 notes, 1 notice, phase_start:\n%+v", len(evs), notes, notices, evs)
	}
	u, err := s.Usage(ctx, "r1")
	if err != nil || u.Notes != 3 || u.NotesDropped != 47 {
		t.Fatalf("usage %+v %v, want 3 notes kept and 47 counted", u, err)
	}

	r, _ := s.GetRun(ctx, "r1")
	r.Status, r.EndedAt = curev1.RunStatus_RUN_SUCCEEDED, time.Now().Add(-40*24*time.Hour)
	if err := s.UpdateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	s.prune(ctx, time.Now(), DefaultRetention, slog.New(slog.DiscardHandler))
	evs, _ = s.Events(ctx, "r1", 0, 0)
	var kept []string
	for _, e := range evs {
		kept = append(kept, string(e.Kind)+":"+e.Message)
	}
	if got := strings.Join(kept, ","); got != "info:run created,phase_start:" {
		t.Fatalf("after retention: %s, want the essential timeline only", got)
	}
}

// A boot's reconnects are counted on its token and against the run's
// caps, and summarised in one note rewritten in place.
func TestReconnectSummary(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	runningRun(t, s, "r1")
	issue(t, s, "tok", "r1", "w1", "10.0.0.5", time.Now().Add(time.Hour))
	if _, _, err := bind(s, "tok", "boot1", "secret1", "10.0.0.5"); err != nil {
		t.Fatal(err)
	}
	lim := EventLimits{MaxEvents: 5, MaxBytes: 1 << 20, HardEvents: 8, MaxVerdicts: 2}
	rc := Reconnect{TokenHash: TokenHash("tok"), RunID: "r1", NodeID: "n1", BootID: "boot1", Peer: "10.0.0.5"}
	first := time.Now().Add(-time.Hour)
	for i := range 20 {
		rc.Time = first.Add(time.Duration(i) * time.Minute)
		n, err := s.NoteReconnect(ctx, rc, lim)
		if err != nil || n != int64(i+1) {
			t.Fatalf("reconnect %d: count %d %v", i, n, err)
		}
	}
	evs, _ := s.Events(ctx, "r1", 0, 0)
	if len(evs) != 1 || !evs[0].Note || evs[0].BootID != "boot1" ||
		!strings.HasPrefix(evs[0].Message, "runner reconnected 20 times since "+first.UTC().Format(time.RFC3339)) ||
		!strings.Contains(evs[0].Message, "last from 10.0.0.5 at "+rc.Time.UTC().Format(time.RFC3339)) {
		t.Fatalf("timeline after 20 reconnects: %+v", evs)
	}
	u, _ := s.Usage(ctx, "r1")
	if u.Events != 5 || u.Dropped != 15 || u.Notes != 1 {
		t.Fatalf("usage %+v: want 5 reconnects charged as events (the cap), 15 counted as dropped, 1 note", u)
	}
	// A token that is not bound to that boot counts nothing.
	if _, err := s.NoteReconnect(ctx, Reconnect{TokenHash: TokenHash("tok"), RunID: "r1", BootID: "other"}, lim); err == nil {
		t.Fatal("reconnect of a boot without a bound token was counted")
	}
	// The first dropped runner event of a run is the one the caller reports.
	runningRun(t, s, "r2")
	for seq := uint64(1); seq <= 8; seq++ {
		res, err := s.AppendRunnerEvent(ctx, Event{RunID: "r2", BootID: "b", Seq: seq, Kind: "metric"}, nil, lim)
		if err != nil || res.FirstDrop != (seq == 6) {
			t.Fatalf("metric %d: %+v %v", seq, res, err)
		}
	}
}

func TestHasInventory(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	runningRun(t, s, "r1")
	if ok, err := s.HasInventory(ctx, "r1", "b1"); ok || err != nil {
		t.Fatalf("before: %t %v", ok, err)
	}
	if _, err := s.PutInventory(ctx, InventoryRecord{NodeID: "n1", RunID: "r1", BootID: "b1", JSON: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.HasInventory(ctx, "r1", "b1"); !ok || err != nil {
		t.Fatalf("after: %t %v", ok, err)
	}
	if ok, _ := s.HasInventory(ctx, "r1", "b2"); ok {
		t.Fatal("another boot has it too")
	}
}
