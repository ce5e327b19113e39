package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestEKTrustOnFirstUseAndPin(t *testing.T) {
	ctx := context.Background()
	st, err := Open(filepath.Join(t.TempDir(), "cure.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n := Node{ID: "n1", BMCURL: "https://bmc", MACs: []string{"52:54:00:00:00:01"}}
	if err := st.UpsertNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	if _, err := st.NodeEK(ctx, "n1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("EK before any boot: %v", err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	got, err := st.EnrollEK(ctx, NodeEK{NodeID: "n1", SHA256: "aa", EnrolledAt: now, RunID: "r1"})
	if err != nil || got.SHA256 != "aa" || got.Source != EKTrustOnFirstUse || got.RunID != "r1" || !got.EnrolledAt.Equal(now) {
		t.Fatalf("first use: %+v %v", got, err)
	}
	// A second boot with another EK cannot replace the first: it races, it loses.
	if got, err = st.EnrollEK(ctx, NodeEK{NodeID: "n1", SHA256: "bb", EnrolledAt: now, RunID: "r2"}); err != nil || got.SHA256 != "aa" {
		t.Fatalf("second enrollment replaced the first: %+v %v", got, err)
	}
	// The nodes file pins another: the declaration wins.
	n.EKSHA256 = "CC"
	if err := st.UpsertNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	if got, _ = st.NodeEK(ctx, "n1"); got.SHA256 != "cc" || got.Source != EKPinned {
		t.Fatalf("pinned: %+v", got)
	}
	// A declaration without the pin drops it; then first use again.
	n.EKSHA256 = ""
	if err := st.UpsertNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	if _, err := st.NodeEK(ctx, "n1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("pin removed from the declaration kept: %v", err)
	}
	if got, _ = st.EnrollEK(ctx, NodeEK{NodeID: "n1", SHA256: "dd", EnrolledAt: now}); got.SHA256 != "dd" {
		t.Fatalf("enrollment after the pin went: %+v", got)
	}
	// A TOFU enrollment survives a declaration without a pin.
	if err := st.UpsertNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	if got, _ = st.NodeEK(ctx, "n1"); got.SHA256 != "dd" {
		t.Fatalf("TOFU EK lost to a node update: %+v", got)
	}
}

func TestFirmwareRecordAndChange(t *testing.T) {
	ctx := context.Background()
	st, err := Open(filepath.Join(t.TempDir(), "cure.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.UpsertNode(ctx, Node{ID: "n1", BMCURL: "https://bmc", MACs: []string{"52:54:00:00:00:01"}}); err != nil {
		t.Fatal(err)
	}
	// A change noted before any record: the record it makes is empty.
	if err := st.FirmwareChanged(ctx, "n1", "r0", "bios flash"); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.GetFirmwareRecord(ctx, "n1"); err != nil || len(rec.PCRs) != 0 || rec.ChangeRun != "r0" {
		t.Fatalf("change before a record: %+v %v", rec, err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := st.RecordFirmware(ctx, FirmwareRecord{NodeID: "n1", SKU: "s", Firmware: "1.0", PCRs: map[string]string{"0": "ab"}, RunID: "r1", RecordedAt: now}); err != nil {
		t.Fatal(err)
	}
	rec, err := st.GetFirmwareRecord(ctx, "n1")
	if err != nil || rec.PCRs["0"] != "ab" || rec.ChangeRun != "" || rec.RunID != "r1" || rec.Firmware != "1.0" {
		t.Fatalf("record: %+v %v", rec, err)
	}
	if err := st.FirmwareChanged(ctx, "n1", "r2", "bios flash"); err != nil {
		t.Fatal(err)
	}
	if rec, _ = st.GetFirmwareRecord(ctx, "n1"); rec.PCRs["0"] != "ab" || rec.ChangeRun != "r2" || rec.ChangeReason != "bios flash" {
		t.Fatalf("change noted: %+v", rec)
	}
	if err := st.PutBootAttestation(ctx, BootAttestation{RunID: "r2", BootID: "b1", NodeID: "n1", Status: AttestFailed, Detail: "d", Time: now}); err != nil {
		t.Fatal(err)
	}
	if a, err := st.GetBootAttestation(ctx, "r2", "b1"); err != nil || a.Status != AttestFailed {
		t.Fatalf("boot attestation: %+v %v", a, err)
	}
}

// TestSKUPCRs: the first vetted values of a SKU's firmware are kept, a
// later node's never replace them, PCR 4 is kept per image, and another
// firmware version knows nothing.
func TestSKUPCRs(t *testing.T) {
	ctx := context.Background()
	st, err := Open(filepath.Join(t.TempDir(), "cure.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.SKUPCRs(ctx, "sku", "1.0", "img1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("nothing known: %v, want ErrNotFound", err)
	}
	first := KnownPCRs{SKU: "sku", Firmware: "1.0", Image: "img1", PCRs: map[string]string{"0": "a0", "4": "a4", "7": "a7"}, NodeID: "n1", RunID: "r1", At: time.Now()}
	if err := st.AddSKUPCRs(ctx, first); err != nil {
		t.Fatal(err)
	}
	later := first
	later.NodeID, later.PCRs = "n2", map[string]string{"0": "b0", "4": "b4", "7": "b7"}
	if err := st.AddSKUPCRs(ctx, later); err != nil {
		t.Fatal(err)
	}
	got, err := st.SKUPCRs(ctx, "sku", "1.0", "img1")
	if err != nil || got["0"] != "a0" || got["4"] != "a4" || got["7"] != "a7" || len(got) != 3 {
		t.Fatalf("known values %v %v; want the first node's", got, err)
	}
	// Another image: its PCR 4 is not known yet, the firmware's PCRs are.
	if got, err := st.SKUPCRs(ctx, "sku", "1.0", "img2"); err != nil || got["4"] != "" || got["0"] != "a0" {
		t.Fatalf("other image: %v %v", got, err)
	}
	if _, err := st.SKUPCRs(ctx, "sku", "2.0", "img1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("other firmware: %v, want ErrNotFound", err)
	}
}
