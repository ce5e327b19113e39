package eventlog

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"
)

func TestReplayMatchesHandComputedPCRs(t *testing.T) {
	w := NewWriter()
	d1 := w.Event(0, EVSCRTMVersion, []byte("fw"))
	d2 := w.Event(0, EVSeparator, []byte{0, 0, 0, 0})
	app := sha256.Sum256([]byte("app"))
	w.Digest(4, EVEFIBootServicesApplication, app[:], nil)
	l, err := Parse(w.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	ext := func(cur, d []byte) []byte { h := sha256.Sum256(append(bytes.Clone(cur), d...)); return h[:] }
	zero := make([]byte, 32)
	want0 := ext(ext(zero, d1), d2)
	want4 := ext(zero, app[:])
	got := l.Replay()
	if !bytes.Equal(got[0], want0) || !bytes.Equal(got[4], want4) {
		t.Fatalf("replay %x", got)
	}
	if err := l.Check(map[uint32][]byte{0: want0, 4: want4, 7: zero}); err != nil {
		t.Fatal(err)
	}
	err = l.Check(map[uint32][]byte{0: want0, 4: zero})
	var me *MismatchError
	if !errors.As(err, &me) || me.PCR != 4 {
		t.Fatalf("mismatch not named: %v", err)
	}
	if d := l.Digests(4, EVEFIBootServicesApplication); len(d) != 1 || !bytes.Equal(d[0], app[:]) {
		t.Fatalf("digests %x", d)
	}
}

// What go-attestation's and go-eventlog's replay accept (see the package
// doc), Check refuses: a PCR 5 the TPM extended with ExitBootServices events
// the log lacks, and a quoted PCR the log never touches away from its reset
// value. Each refusal names the PCR.
func TestCheckRefusesWhatWorkaroundsPass(t *testing.T) {
	w := NewWriter()
	fw := w.Event(0, EVSCRTMVersion, []byte("fw"))
	sep := w.Event(5, EVSeparator, []byte{0, 0, 0, 0})
	l, err := Parse(w.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	ext := func(cur []byte, data string) []byte {
		d := sha256.Sum256([]byte(data))
		h := sha256.Sum256(append(bytes.Clone(cur), d[:]...))
		return h[:]
	}
	zero := make([]byte, 32)
	pcr0 := sha256.Sum256(append(bytes.Clone(zero), fw...))
	pcr5 := sha256.Sum256(append(bytes.Clone(zero), sep...))
	ebs := ext(ext(pcr5[:], "Exit Boot Services Invocation"), "Exit Boot Services Returned with Success")
	other := sha256.Sum256([]byte("PCR 7 the log never touches"))
	for want, quoted := range map[uint32]map[uint32][]byte{
		5: {0: pcr0[:], 5: ebs},
		7: {0: pcr0[:], 5: pcr5[:], 7: other[:]},
	} {
		var me *MismatchError
		if err := l.Check(quoted); !errors.As(err, &me) || me.PCR != want {
			t.Errorf("PCR %d: Check returned %v", want, err)
		}
	}
	if err := l.Check(map[uint32][]byte{0: pcr0[:], 5: pcr5[:], 7: zero}); err != nil {
		t.Fatalf("the log's own PCRs: %v", err)
	}
}

func TestStartupLocality(t *testing.T) {
	w := NewWriter()
	w.Digest(0, EVNoAction, make([]byte, 32), append([]byte("StartupLocality\x00"), 3))
	d := w.Event(0, EVSeparator, nil)
	l, err := Parse(w.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	init := make([]byte, 32)
	init[31] = 3
	h := sha256.Sum256(append(init, d...))
	if got := l.Replay()[0]; !bytes.Equal(got, h[:]) {
		t.Fatalf("PCR 0 from locality 3: %x want %x", got, h)
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	good := NewWriter()
	good.Event(0, EVSeparator, []byte{1})
	raw := good.Bytes()
	for name, b := range map[string][]byte{
		"empty":     nil,
		"truncated": raw[:len(raw)-1],
		"sha1 log":  append(make([]byte, 8), raw[8:]...),
		"huge":      make([]byte, MaxLogBytes+1),
	} {
		if _, err := Parse(b); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	bad := bytes.Clone(raw)
	// the event's PCR index (first field after the header) out of range
	hdr := len(raw) - (4 + 4 + 4 + 2 + 32 + 4 + 1)
	bad[hdr] = 30
	if _, err := Parse(bad); err == nil {
		t.Error("PCR 30 parsed")
	}
}

func FuzzParse(f *testing.F) {
	w := NewWriter()
	w.Event(0, EVSeparator, []byte{1})
	f.Add(w.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		if l, err := Parse(b); err == nil {
			l.Replay()
		}
	})
}
