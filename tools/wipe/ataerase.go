package wipe

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cure-oss/cure/tools/ata"
)

// errATAPasswordSet marks a failure after the temporary password reached
// the drive. Such a failure is never "unsupported": the drive's security
// state was touched, so trying the next method would hide it.
var errATAPasswordSet = errors.New("ATA security erase failed after the temporary user password was set")

// ataSecurityErase runs SECURITY ERASE UNIT (ACS-3 7.39) the only way the
// Security feature set allows: with a user password set. The password is
// random per run and never leaves this function; a successful erase
// clears it, and any failure after it was set removes it again with
// SECURITY DISABLE PASSWORD, because a disk left with a password nobody
// knows locks at its next power-on.
func ataSecurityErase(ctx context.Context, t ata.Transport, enhanced bool, log *slog.Logger) ([]string, error) {
	var ev []string
	id, err := ata.IdentifyDevice(t)
	if err != nil {
		return ev, fmt.Errorf("IDENTIFY before erase: %w", err)
	}
	ev = append(ev, "ATA before erase: "+id.Summary())
	// The plan was made from an earlier IDENTIFY; the state can change
	// (a hot-plug, another tool), and setting a password on a drive that
	// already has one would fail half way.
	if why := ataRefusal(id, enhanced); why != "" {
		return ev, fmt.Errorf("not started: %s", why)
	}
	est, timeout := id.Erase(enhanced), id.EraseTimeout(enhanced)
	// ERASE UNIT cannot be interrupted once sent: honour the caller before.
	if err := ctx.Err(); err != nil {
		return ev, fmt.Errorf("not started: %w", err)
	}
	if dl, ok := ctx.Deadline(); ok && est.Reported && time.Until(dl) < est.Duration() {
		return ev, fmt.Errorf("not started: the deadline is in %s but the drive estimates %s for SECURITY ERASE UNIT, which cannot be interrupted",
			time.Until(dl).Round(time.Second), est)
	}
	pw, err := ata.NewPassword(rand.Reader)
	if err != nil {
		return ev, err
	}
	if err := ata.SetPassword(t, ata.User, pw); err != nil {
		// Nothing changed on the drive; ErrUnsupported passes through.
		return ev, fmt.Errorf("set temporary user password: %w", err)
	}
	log.Info("wipe: temporary ATA user password set (value never logged); a successful erase clears it")
	ev = append(ev, "temporary ATA user password set (random per run, value not recorded)")

	eraseErr := func() error {
		if err := ata.ErasePrepare(t); err != nil {
			return err
		}
		log.Info("wipe: SECURITY ERASE UNIT sent; it blocks until the drive finishes",
			"enhanced", enhanced, "estimate", est.String(), "timeout", timeout)
		t0 := time.Now()
		if err := ata.EraseUnit(t, ata.User, pw, enhanced, timeout); err != nil {
			return err
		}
		took := time.Since(t0)
		ev = append(ev, fmt.Sprintf("SECURITY ERASE UNIT (%s) completed in %s (drive estimate %s, timeout %s)",
			map[bool]string{true: "enhanced", false: "normal"}[enhanced], took.Round(time.Millisecond), est, timeout))
		after, err := ata.IdentifyDevice(t)
		if err != nil {
			return fmt.Errorf("IDENTIFY after erase: %w", err)
		}
		if after.Security.Enabled || after.Security.Locked {
			return fmt.Errorf("ERASE UNIT reported success but IDENTIFY word 128 %#04x still shows %s", after.Word128, after.Security.State())
		}
		ev = append(ev, fmt.Sprintf("ATA after erase: word 128 %#04x, %s: the erase cleared the temporary password", after.Word128, after.Security.State()))
		return nil
	}()
	if eraseErr == nil {
		return ev, nil
	}

	log.Warn("wipe: ATA erase failed with the temporary password set; removing it", "err", eraseErr)
	if cleanErr := ataRemovePassword(t, pw); cleanErr != nil {
		log.Error("wipe: THE DRIVE IS LEFT WITH AN ATA USER PASSWORD NOBODY KNOWS; it locks at its next power-on",
			"eraseErr", eraseErr, "disablePasswordErr", cleanErr)
		ev = append(ev, "TEMPORARY ATA PASSWORD STILL SET: "+cleanErr.Error())
		return ev, fmt.Errorf("%w: %w; AND removing it failed: %v. THE DRIVE IS LEFT WITH AN ATA USER PASSWORD NOBODY KNOWS and locks at its next power-on: "+
			"erase or unlock it with the drive's master password (SECURITY ERASE UNIT, master identifier) or the vendor's tools before it goes to anyone",
			errATAPasswordSet, eraseErr, cleanErr)
	}
	ev = append(ev, "temporary ATA password removed again with SECURITY DISABLE PASSWORD")
	return ev, fmt.Errorf("%w: %w (the temporary password was removed again with SECURITY DISABLE PASSWORD)", errATAPasswordSet, eraseErr)
}

// ataRemovePassword takes the drive back to SEC1 with pw: UNLOCK first if
// the failure left it locked (a reset in mid-erase does), then DISABLE
// PASSWORD, then IDENTIFY to prove it.
func ataRemovePassword(t ata.Transport, pw ata.Password) error {
	if id, err := ata.IdentifyDevice(t); err == nil {
		if !id.Security.Enabled {
			return nil // the erase finished after all, or never got that far
		}
		if id.Security.Locked {
			if err := ata.Unlock(t, ata.User, pw); err != nil {
				return err
			}
		}
	}
	if err := ata.DisablePassword(t, ata.User, pw); err != nil {
		return err
	}
	id, err := ata.IdentifyDevice(t)
	if err != nil {
		return fmt.Errorf("IDENTIFY after DISABLE PASSWORD: %w", err)
	}
	if id.Security.Enabled {
		return fmt.Errorf("DISABLE PASSWORD succeeded but IDENTIFY word 128 %#04x still shows %s", id.Word128, id.Security.State())
	}
	return nil
}
