package attestation

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/cure-oss/cure/tools/tpm/eventlog"
)

// The real boot's log and its image (testdata/README.md).
const ovmfImage = "d15a551bd2814bb95501d5f58d85aa0c123597af0bc73e27a2c039389ef6ac6e"

func ovmfLog(t testing.TB) *eventlog.Log {
	t.Helper()
	raw, err := os.ReadFile("testdata/ovmf-https-boot.eventlog")
	if err != nil {
		t.Fatal(err)
	}
	l, err := eventlog.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// rewrite is the real log re-written with edit applied to its events (in
// order; edit returns the events to write in ev's place).
func rewrite(t *testing.T, edit func(ev eventlog.Event) []eventlog.Event) *eventlog.Log {
	t.Helper()
	w := eventlog.NewWriter()
	for _, ev := range ovmfLog(t).Events[1:] {
		for _, e := range edit(ev) {
			w.Digest(e.PCR, e.Type, e.SHA256, e.Data)
		}
	}
	l, err := eventlog.Parse(w.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func event(pcr, typ uint32, digest []byte, data string) eventlog.Event {
	if digest == nil {
		d := sha256.Sum256([]byte(data))
		digest = d[:]
	}
	return eventlog.Event{PCR: pcr, Type: typ, SHA256: digest, Data: []byte(data)}
}

// TestCheckBootPath: the real OVMF HTTPS boot of the CURE image passes;
// every other shape of PCR 4 (a foreign application before or after the
// image, a second image, an application disguised as a firmware action, a
// second separator, another image) and a boot without ExitBootServices
// after the image is refused naming the PCR and, where one is extra, the
// event's index, type and digest.
func TestCheckBootPath(t *testing.T) {
	image, _ := hex.DecodeString(ovmfImage)
	if err := CheckBootPath(ovmfLog(t), image); err != nil {
		t.Fatalf("the real boot: %v", err)
	}
	foreign := sha256.Sum256([]byte("vendor shell"))
	isImage := func(ev eventlog.Event) bool { return ev.Type == eventlog.EVEFIBootServicesApplication }
	isEBS := func(ev eventlog.Event) bool { return string(ev.Data) == ActionExitBS }
	for _, c := range []struct {
		name  string
		edit  func(eventlog.Event) []eventlog.Event
		image []byte
		want  string // in the error
	}{
		{"foreign application before the image", func(ev eventlog.Event) []eventlog.Event {
			if isImage(ev) {
				return []eventlog.Event{event(4, eventlog.EVEFIBootServicesApplication, foreign[:], "shell"), ev}
			}
			return []eventlog.Event{ev}
		}, image, "PCR 4: event 26 (EV_EFI_BOOT_SERVICES_APPLICATION, sha256 " + hex.EncodeToString(foreign[:]) + "): a boot application that is not the CURE image"},
		{"foreign application after the image", func(ev eventlog.Event) []eventlog.Event {
			if isImage(ev) {
				return []eventlog.Event{ev, event(4, eventlog.EVEFIBootServicesApplication, foreign[:], "shell")}
			}
			return []eventlog.Event{ev}
		}, image, "PCR 4: event 27 (EV_EFI_BOOT_SERVICES_APPLICATION, sha256 " + hex.EncodeToString(foreign[:]) + "): a second boot application"},
		{"the image twice", func(ev eventlog.Event) []eventlog.Event {
			if isImage(ev) {
				return []eventlog.Event{ev, ev}
			}
			return []eventlog.Event{ev}
		}, image, "event 27 (EV_EFI_BOOT_SERVICES_APPLICATION, sha256 " + ovmfImage + "): a second boot application"},
		{"an application disguised as a boot action", func(ev eventlog.Event) []eventlog.Event {
			if isImage(ev) {
				return []eventlog.Event{event(4, eventlog.EVEFIAction, foreign[:], ActionCallingApp), ev}
			}
			return []eventlog.Event{ev}
		}, image, "PCR 4: event 26 (EV_EFI_ACTION, sha256 " + hex.EncodeToString(foreign[:]) + "): not a firmware boot action"},
		{"a driver in PCR 4", func(ev eventlog.Event) []eventlog.Event {
			if isImage(ev) {
				return []eventlog.Event{event(4, eventlog.EVEFIBootServicesDriver, foreign[:], "driver"), ev}
			}
			return []eventlog.Event{ev}
		}, image, "event 26 (EV_EFI_BOOT_SERVICES_DRIVER"},
		{"a second separator", func(ev eventlog.Event) []eventlog.Event {
			if isImage(ev) {
				return []eventlog.Event{event(4, eventlog.EVSeparator, nil, "\x00\x00\x00\x00"), ev}
			}
			return []eventlog.Event{ev}
		}, image, "event 26 (EV_SEPARATOR"},
		{"an event after the image", func(ev eventlog.Event) []eventlog.Event {
			if isImage(ev) {
				return []eventlog.Event{ev, event(4, eventlog.EVEFIAction, nil, ActionCallingApp)}
			}
			return []eventlog.Event{ev}
		}, image, "event 27 (EV_EFI_ACTION"},
		{"no ExitBootServices", func(ev eventlog.Event) []eventlog.Event {
			if isEBS(ev) {
				return nil
			}
			return []eventlog.Event{ev}
		}, image, "PCR 5: no \"Exit Boot Services Invocation\""},
		{"ExitBootServices before the image", func(ev eventlog.Event) []eventlog.Event {
			if isEBS(ev) {
				return nil
			}
			if isImage(ev) {
				return []eventlog.Event{event(5, eventlog.EVEFIAction, nil, ActionExitBS), ev}
			}
			return []eventlog.Event{ev}
		}, image, "PCR 5: no \"Exit Boot Services Invocation\" after the image"},
		{"no application", func(ev eventlog.Event) []eventlog.Event {
			if isImage(ev) {
				return nil
			}
			return []eventlog.Event{ev}
		}, image, "PCR 4: no boot application was measured"},
		{"another image", func(ev eventlog.Event) []eventlog.Event { return []eventlog.Event{ev} }, foreign[:],
			"PCR 4: event 26 (EV_EFI_BOOT_SERVICES_APPLICATION, sha256 " + ovmfImage + "): a boot application that is not the CURE image"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckBootPath(rewrite(t, c.edit), c.image)
			var be *BootPathError
			if err == nil || !errors.As(err, &be) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a BootPathError containing %q", err, c.want)
			}
		})
	}
	// A firmware's retried boot attempt (its "Returning" and "Calling"
	// actions again) is its own doing and passes.
	retried := rewrite(t, func(ev eventlog.Event) []eventlog.Event {
		if isImage(ev) {
			return []eventlog.Event{event(4, eventlog.EVEFIAction, nil, ActionReturningApp), event(4, eventlog.EVEFIAction, nil, ActionCallingApp), ev}
		}
		return []eventlog.Event{ev}
	})
	if err := CheckBootPath(retried, image); err != nil {
		t.Fatalf("a retried boot attempt: %v", err)
	}
}

// FuzzCheckBootPath: hostile log bytes never panic, and a log the checker
// accepts has exactly one boot application in PCR 4, the image, and
// nothing in PCR 4 whose digest is not the image's or the hash of its data.
func FuzzCheckBootPath(f *testing.F) {
	raw, err := os.ReadFile("testdata/ovmf-https-boot.eventlog")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	w := eventlog.NewWriter()
	w.Event(4, eventlog.EVEFIAction, []byte(ActionCallingApp))
	f.Add(w.Bytes())
	image, _ := hex.DecodeString(ovmfImage)
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := eventlog.Parse(b)
		if err != nil {
			return
		}
		if CheckBootPath(l, image) != nil {
			return
		}
		apps := 0
		for _, ev := range l.Events {
			if ev.PCR != BootPathPCR || ev.Type == eventlog.EVNoAction {
				continue
			}
			sum := sha256.Sum256(ev.Data)
			switch {
			case ev.Type == eventlog.EVEFIBootServicesApplication && string(ev.SHA256) == string(image):
				apps++
			case string(ev.SHA256) != string(sum[:]):
				t.Fatalf("accepted a PCR 4 event %d whose digest is neither the image nor its data's hash", ev.Index)
			}
		}
		if apps != 1 {
			t.Fatalf("accepted a log with %d images in PCR 4", apps)
		}
	})
}
