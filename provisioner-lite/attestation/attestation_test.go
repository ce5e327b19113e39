package attestation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/api/imagereport"
	"github.com/cure-oss/cure/tools/tpm/attest"
	"github.com/cure-oss/cure/tools/tpm/eventlog"
	"github.com/cure-oss/cure/tools/tpm/swtpmtest"
)

// booted is a swtpm after a firmware boot that started app, with its keys.
type booted struct {
	keys *attest.Keys
	log  []byte
}

func boot(t *testing.T, app []byte, extraPCR4 bool) *booted {
	sw := swtpmtest.Start(t, "")
	b := sw.Measure()
	if extraPCR4 {
		// An application (a shell, a vendor tool) measured before
		// CURE's: the UKI's hash is still among the boot applications,
		// but it is not the first and only one (CheckBootPath refuses).
		b.Digest(4, eventlog.EVEFIBootServicesApplication, make([]byte, 32), []byte("vendor app"))
	}
	b.Firmware("fw", app)
	k, err := attest.NewKeys(sw.Open())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return &booted{keys: k, log: b.Log.Bytes()}
}

func (b *booted) answer(t *testing.T, ch *curev1.AttestChallenge) *curev1.Attestation {
	t.Helper()
	s, err := b.keys.Activate(ch.GetCredentialBlob(), ch.GetEncryptedSecret())
	if err != nil {
		t.Fatal(err)
	}
	q, err := b.keys.Quote(ch.GetNonce(), ch.GetPcrs())
	if err != nil {
		t.Fatal(err)
	}
	return &curev1.Attestation{ChallengeId: ch.GetChallengeId(), ActivatedSecret: s, Quote: q.Attest, Signature: q.Signature, Pcrs: q.PCRs, EventLog: b.log}
}

func TestJudge(t *testing.T) {
	appHash := sha256.Sum256([]byte("cure.efi"))
	app := hex.EncodeToString(appHash[:])
	now := time.Now()
	ctx := context.Background()
	cs := &Challenges{}
	issue := func(b *booted, boot string) *curev1.AttestChallenge {
		_, ch, err := cs.Issue(ctx, "tok", boot, &curev1.AttestBegin{EkPublic: b.keys.EKPublic, AkPublic: b.keys.AKPublic}, QuotePCRs(nil), now)
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	good := boot(t, appHash[:], false)

	t.Run("good, by Authenticode hash", func(t *testing.T) {
		a := good.answer(t, issue(good, "b1"))
		r := cs.Judge(ctx, "tok", "b1", a, Expected{UKI: &imagereport.UKI{AuthenticodeSHA256: app}}, now)
		if r.Status != Passed || len(r.EKSHA256) != 64 || len(r.PCRs) != len(DefaultPCRs) {
			t.Fatalf("%+v", r)
		}
		// The same answer again: the challenge is spent.
		if r := cs.Judge(ctx, "tok", "b1", a, Expected{}, now); r.Status != Failed || !strings.Contains(r.Detail, "no such challenge") {
			t.Fatalf("replay: %+v", r)
		}
	})
	t.Run("good, by PCR value", func(t *testing.T) {
		ch := issue(good, "b1")
		a := good.answer(t, ch)
		want := map[string]string{"4": hex.EncodeToString(a.GetPcrs()[4])}
		if r := cs.Judge(ctx, "tok", "b1", a, Expected{UKI: &imagereport.UKI{PCRs: want}}, now); r.Status != Passed {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("other image", func(t *testing.T) {
		a := good.answer(t, issue(good, "b1"))
		other := strings.Repeat("ab", 32)
		// Without the Authenticode hash, PCR 4 is judged by value.
		r := cs.Judge(ctx, "tok", "b1", a, Expected{UKI: &imagereport.UKI{PCRs: map[string]string{"4": strings.Repeat("cd", 32)}}}, now)
		if r.Status != Failed || r.Mismatch == nil || r.Mismatch.PCR != 4 || r.Mismatch.Expected != strings.Repeat("cd", 32) || r.Mismatch.Observed != hex.EncodeToString(a.GetPcrs()[4]) {
			t.Fatalf("%+v %+v", r, r.Mismatch)
		}
		if !strings.Contains(r.Detail, "PCR 4: expected "+strings.Repeat("cd", 32)+", observed "+hex.EncodeToString(a.GetPcrs()[4])) {
			t.Errorf("detail does not name PCR, expected and observed: %s", r.Detail)
		}
		// With it, by the boot path: the measured application is named.
		a = good.answer(t, issue(good, "b1"))
		r = cs.Judge(ctx, "tok", "b1", a, Expected{UKI: &imagereport.UKI{AuthenticodeSHA256: other, PCRs: map[string]string{"4": strings.Repeat("cd", 32)}}}, now)
		if r.Status != Failed || r.Mismatch == nil || r.Mismatch.PCR != 4 || !strings.Contains(r.Mismatch.Observed, app) || !strings.Contains(r.Mismatch.Expected, other) {
			t.Fatalf("hash check: %+v %+v", r, r.Mismatch)
		}
	})
	t.Run("foreign application before the image", func(t *testing.T) {
		// Firmware (or whoever controls the boot order) starts another
		// application before CURE's: the image's hash is still in the
		// log, but the boot path is not the image's.
		vendor := boot(t, appHash[:], true)
		a := vendor.answer(t, issue(vendor, "b1"))
		r := cs.Judge(ctx, "tok", "b1", a, Expected{UKI: &imagereport.UKI{AuthenticodeSHA256: app}}, now)
		if r.Status != Failed || r.Mismatch == nil || r.Mismatch.PCR != 4 || !strings.Contains(r.Detail, "EV_EFI_BOOT_SERVICES_APPLICATION, sha256 "+strings.Repeat("00", 32)) {
			t.Fatalf("%+v %+v", r, r.Mismatch)
		}
	})
	t.Run("event log of another boot", func(t *testing.T) {
		a := good.answer(t, issue(good, "b1"))
		w := eventlog.NewWriter()
		w.Event(0, eventlog.EVSeparator, nil)
		a.EventLog = w.Bytes()
		if r := cs.Judge(ctx, "tok", "b1", a, Expected{}, now); r.Status != Failed || !strings.Contains(r.Detail, "replay") || r.Mismatch == nil || r.Mismatch.PCR != 0 {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("challenge of another boot", func(t *testing.T) {
		a := good.answer(t, issue(good, "b1"))
		if r := cs.Judge(ctx, "tok", "b2", a, Expected{}, now); r.Status != Failed || !strings.Contains(r.Detail, "another boot") {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("expired", func(t *testing.T) {
		a := good.answer(t, issue(good, "b1"))
		if r := cs.Judge(ctx, "tok", "b1", a, Expected{}, now.Add(time.Hour)); r.Status != Failed || !strings.Contains(r.Detail, "expired") {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("absent", func(t *testing.T) {
		if r := cs.Judge(ctx, "tok", "b1", &curev1.Attestation{Error: "no TPM: open /dev/tpmrm0: no such file"}, Expected{}, now); r.Status != Absent || !strings.Contains(r.Detail, "no TPM") {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		small := &Challenges{Max: 2}
		var ids []string
		for i := 0; i < 3; i++ {
			_, ch, err := small.Issue(ctx, "tok", "b", &curev1.AttestBegin{EkPublic: good.keys.EKPublic, AkPublic: good.keys.AKPublic}, DefaultPCRs, now)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, ch.GetChallengeId())
		}
		if _, err := small.keeper().Take(ctx, ids[0], now); err == nil {
			t.Fatal("the oldest challenge was not evicted")
		}
		if _, err := small.keeper().Take(ctx, ids[2], now); err != nil {
			t.Fatal("the oldest challenge was not evicted")
		}
	})
}

func TestFirmwareDrift(t *testing.T) {
	q := map[uint32][]byte{0: {1}, 1: {2}, 7: {3}}
	rec := FirmwareValues(q)
	if m := FirmwareDrift(rec, q); m != nil {
		t.Fatalf("no drift: %v", m)
	}
	q2 := map[uint32][]byte{0: {1}, 1: {9}, 7: {3}}
	if m := FirmwareDrift(rec, q2); m == nil || m.PCR != 1 || m.Expected != "02" || m.Observed != "09" {
		t.Fatalf("drift: %+v", m)
	}
}

// TestRebaseline: after the pipeline's own flash, each of SKUPCRs must be
// unchanged or the SKU's known value for the new firmware; PCR 1 is the
// node's own and is re-recorded; with nothing known, a changed PCR holds.
func TestRebaseline(t *testing.T) {
	q := map[uint32][]byte{0: {0xa0}, 1: {0xa1}, 2: {0xa2}, 3: {0xa3}, 4: {0xa4}, 7: {0xa7}}
	rec := BootValues(q)
	if m := Rebaseline(rec, nil, q); m != nil {
		t.Fatalf("unchanged: %v", m)
	}
	flashed := map[uint32][]byte{0: {0xb0}, 1: {0xb1}, 2: {0xa2}, 3: {0xa3}, 4: {0xb4}, 7: {0xa7}}
	if m := Rebaseline(rec, nil, flashed); m == nil || m.PCR != 0 || !strings.Contains(m.Expected, "no other node of the SKU is known") || m.Observed != "b0" {
		t.Fatalf("nothing known: %+v, want PCR 0 held", m)
	}
	known := map[string]string{"0": "b0", "4": "b4"}
	if m := Rebaseline(rec, known, flashed); m != nil {
		t.Fatalf("as known on another node: %v", m)
	}
	known["4"] = "c4"
	if m := Rebaseline(rec, known, flashed); m == nil || m.PCR != 4 || !strings.Contains(m.Expected, "the SKU's known c4") {
		t.Fatalf("PCR 4 unlike the SKU's: %+v", m)
	}
	// PCR 4 against the SKU on an ordinary boot: the node's own accepted
	// value passes too; nothing known passes.
	if m := BootPathDrift(map[string]string{"4": "c4"}, rec, flashed); m == nil || m.Expected != "c4" || m.Observed != "b4" {
		t.Fatalf("PCR 4 drift: %+v", m)
	}
	if m := BootPathDrift(map[string]string{"4": "c4"}, map[string]string{"4": "b4"}, flashed); m != nil {
		t.Fatalf("the node's own accepted PCR 4: %v", m)
	}
	if m := BootPathDrift(nil, nil, flashed); m != nil {
		t.Fatalf("nothing known: %v", m)
	}
}
