package ata_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/ata"
	"github.com/cure-oss/cure/tools/ata/atafake"
)

func password(t *testing.T, seed uint64) ata.Password {
	t.Helper()
	pw, err := ata.NewPassword(rand.NewChaCha8([32]byte{byte(seed)}))
	if err != nil {
		t.Fatal(err)
	}
	return pw
}

func drive() *atafake.Drive {
	return &atafake.Drive{Model: "FAKE SSD", Serial: "FAKE0001", Firmware: "1.0", Sectors: 1 << 21, NormalTime: 1, EnhancedTime: 1}
}

func identify(t *testing.T, d ata.Transport) *ata.Identify {
	t.Helper()
	id, err := ata.IdentifyDevice(d)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestSecurityEraseSequence(t *testing.T) {
	d := drive()
	erased := 0
	d.OnErase = func(enhanced bool) {
		if !enhanced {
			t.Error("normal erase ran for an enhanced request")
		}
		erased++
	}
	pw := password(t, 1)
	if id := identify(t, d); !id.Security.Supported || id.Security.Enabled || id.Model != "FAKE SSD" || id.Serial != "FAKE0001" {
		t.Fatalf("before: %s", id.Summary())
	}
	if err := ata.SetPassword(d, ata.User, pw); err != nil {
		t.Fatal(err)
	}
	if id := identify(t, d); !id.Security.Enabled || id.Security.Locked {
		t.Fatalf("after SET PASSWORD: %s", id.Summary())
	}
	if err := ata.ErasePrepare(d); err != nil {
		t.Fatal(err)
	}
	if err := ata.EraseUnit(d, ata.User, pw, true, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if id := identify(t, d); id.Security.Enabled || erased != 1 || d.User != nil {
		t.Fatalf("after ERASE UNIT: %s, erased %d", id.Summary(), erased)
	}
	want := "IDENTIFY DEVICE,SECURITY SET PASSWORD user,IDENTIFY DEVICE,SECURITY ERASE PREPARE,SECURITY ERASE UNIT user enhanced,IDENTIFY DEVICE"
	if got := strings.Join(d.Commands(), ","); got != want {
		t.Errorf("commands %s", got)
	}
	if d.EraseTimeout != 2*time.Hour {
		t.Errorf("erase timeout %s", d.EraseTimeout)
	}
}

func TestSecurityStateMachineRefusals(t *testing.T) {
	pw := password(t, 2)

	// ERASE UNIT without PREPARE right before it aborts, naming ABRT.
	d := drive()
	if err := ata.SetPassword(d, ata.User, pw); err != nil {
		t.Fatal(err)
	}
	if err := ata.ErasePrepare(d); err != nil {
		t.Fatal(err)
	}
	identify(t, d) // any command in between cancels the prepare
	err := ata.EraseUnit(d, ata.User, pw, false, time.Hour)
	if e := ata.AsError(err); e == nil || !e.Aborted() || !strings.Contains(err.Error(), "error 0x04 (ABRT)") {
		t.Fatalf("erase without prepare: %v", err)
	}
	// The password is still set; DISABLE PASSWORD clears it.
	if err := ata.DisablePassword(d, ata.User, pw); err != nil {
		t.Fatal(err)
	}
	if identify(t, d).Security.Enabled {
		t.Fatal("still enabled after DISABLE PASSWORD")
	}

	// Frozen: SET PASSWORD aborts and nothing changes.
	d = drive()
	d.Frozen = true
	err = ata.SetPassword(d, ata.User, pw)
	if e := ata.AsError(err); e == nil || !e.Aborted() || errors.Is(err, ata.ErrUnsupported) {
		t.Fatalf("set password while frozen: %v", err)
	}
	if id := identify(t, d); id.Security.Enabled || !id.Security.Frozen {
		t.Fatalf("frozen drive changed: %s", id.Summary())
	}

	// Wrong password: aborted; five of them expire the counter.
	d = drive()
	d.FixedSense = true // libata with D_SENSE=0
	if err := ata.SetPassword(d, ata.User, pw); err != nil {
		t.Fatal(err)
	}
	other := password(t, 3)
	for range 5 {
		if err := ata.DisablePassword(d, ata.User, other); ata.AsError(err) == nil || !ata.AsError(err).Aborted() {
			t.Fatalf("wrong password: %v", err)
		}
	}
	if !identify(t, d).Security.CountExpired {
		t.Error("count not expired after 5 wrong passwords")
	}

	// Enhanced erase on a drive without it.
	d = drive()
	d.NoEnhanced = true
	_ = ata.SetPassword(d, ata.User, pw)
	_ = ata.ErasePrepare(d)
	if err := ata.EraseUnit(d, ata.User, pw, true, time.Hour); ata.AsError(err) == nil {
		t.Fatalf("enhanced erase without support: %v", err)
	}

	// A SCSI layer without SAT: ErrUnsupported, nothing reached a drive.
	d = drive()
	d.NoPassThrough = true
	if _, err := ata.IdentifyDevice(d); !errors.Is(err, ata.ErrUnsupported) {
		t.Fatalf("no SAT: %v", err)
	}
}

func TestPasswordNeverPrints(t *testing.T) {
	pw := password(t, 4)
	raw := string(pw[:])
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	log.Info("x", "pw", pw, "ptr", &pw)
	log.Info("y", slog.Any("pw", pw))
	text := logs.String() + fmt.Sprint(pw) + fmt.Sprintf("%v %s %x %X %q %d %+v %#v", pw, pw, pw, pw, pw, pw, pw, pw)
	if strings.Contains(text, raw) || strings.Contains(text, fmt.Sprintf("%x", raw)) || strings.Contains(text, fmt.Sprintf("%d", []byte(raw))) {
		t.Fatalf("password leaked: %s", text)
	}
	if !strings.Contains(text, "redacted") {
		t.Errorf("no redaction marker: %s", text)
	}
}

func TestNewPassword(t *testing.T) {
	a, b := password(t, 5), password(t, 6)
	if a == b {
		t.Error("two seeds gave one password")
	}
	for _, c := range a {
		if !strings.ContainsRune("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", rune(c)) {
			t.Fatalf("password byte %#x outside the alphabet", c)
		}
	}
	if _, err := ata.NewPassword(bytes.NewReader(make([]byte, 10))); err == nil {
		t.Error("short random source accepted")
	}
}
