package mstflint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Tool runs mstflint and mstfwreset. The zero value runs the real tools
// found on PATH against the real /sys.
type Tool struct {
	Runner     Runner
	Mstflint   string // default "mstflint"
	Mstfwreset string // default "mstfwreset"
	// LookPath resolves tool names (default exec.LookPath).
	LookPath func(string) (string, error)
	// SysRoot prefixes /sys/bus/pci/devices for device presence ("" = "/").
	SysRoot string
	// Timeouts per command (defaults: query 2 min, burn 20 min, reset 5 min).
	QueryTimeout, BurnTimeout, ResetTimeout time.Duration
	Log                                     *slog.Logger
}

func (t *Tool) runner() Runner {
	if t.Runner == nil {
		return ExecRunner{}
	}
	return t.Runner
}

func (t *Tool) name(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (t *Tool) log() *slog.Logger {
	if t.Log == nil {
		return slog.Default()
	}
	return t.Log
}

func dur(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

var bdf = regexp.MustCompile(`^(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$`)

// NormalizePCI turns "17:00.0" into "0000:17:00.0" and rejects anything
// that is not a PCI address (mstflint would also take /dev/mst paths,
// which CURE does not create).
func NormalizePCI(s string) (string, error) {
	m := bdf.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return "", fmt.Errorf("PCI address %q: expected [dddd:]bb:dd.f", s)
	}
	dom := m[1]
	if dom == "" {
		dom = "0000"
	}
	return strings.ToLower(fmt.Sprintf("%s:%s:%s.%s", dom, m[2], m[3], m[4])), nil
}

// Available checks that mstflint is installed.
func (t *Tool) Available() error {
	lp := t.LookPath
	if lp == nil {
		lp = exec.LookPath
	}
	if _, err := lp(t.name(t.Mstflint, "mstflint")); err != nil {
		return &SkipError{Reason: fmt.Sprintf("mstflint not found in this image (%v)", err)}
	}
	return nil
}

// DevicePresent checks /sys/bus/pci/devices/<pci>.
func (t *Tool) DevicePresent(pci string) error {
	addr, err := NormalizePCI(pci)
	if err != nil {
		return err
	}
	root := t.SysRoot
	if root == "" {
		root = "/"
	}
	p := filepath.Join(root, "sys/bus/pci/devices", addr)
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return &SkipError{Reason: fmt.Sprintf("no PCI device %s on this node (%s absent)", addr, p)}
	} else if err != nil {
		return fmt.Errorf("PCI device %s: %w", addr, err)
	}
	return nil
}

// QueryDevice runs `mstflint -d <pci> query`.
func (t *Tool) QueryDevice(ctx context.Context, pci string) (*Query, error) {
	return t.query(ctx, "-d", pci)
}

// QueryImage runs `mstflint -i <image> query`: the image's own version and PSID.
func (t *Tool) QueryImage(ctx context.Context, image string) (*Query, error) {
	return t.query(ctx, "-i", image)
}

func (t *Tool) query(ctx context.Context, flag, target string) (*Query, error) {
	ctx, cancel := context.WithTimeout(ctx, dur(t.QueryTimeout, 2*time.Minute))
	defer cancel()
	args := []string{flag, target, "query"}
	out, errb, err := t.runner().Run(ctx, t.name(t.Mstflint, "mstflint"), args...)
	if err != nil {
		return nil, cmdError("mstflint query "+target, args, out, errb, err)
	}
	q, err := ParseQuery(out)
	if err != nil {
		return nil, fmt.Errorf("mstflint %s %s query: %w", flag, target, err)
	}
	return q, nil
}

// burn runs `mstflint -d <pci> -i <image> -y burn`. Callers go through
// Apply, which refuses a PSID mismatch first.
func (t *Tool) burn(ctx context.Context, pci, image string) error {
	ctx, cancel := context.WithTimeout(ctx, dur(t.BurnTimeout, 20*time.Minute))
	defer cancel()
	args := []string{"-d", pci, "-i", image, "-y", "burn"}
	out, errb, err := t.runner().Run(ctx, t.name(t.Mstflint, "mstflint"), args...)
	if err != nil {
		return cmdError("mstflint burn", args, out, errb, err)
	}
	return nil
}

// Reset runs `mstfwreset -d <pci> -y reset`, which loads the flash image
// without a reboot where the adapter and driver support it.
func (t *Tool) Reset(ctx context.Context, pci string) error {
	ctx, cancel := context.WithTimeout(ctx, dur(t.ResetTimeout, 5*time.Minute))
	defer cancel()
	args := []string{"-d", pci, "-y", "reset"}
	out, errb, err := t.runner().Run(ctx, t.name(t.Mstfwreset, "mstfwreset"), args...)
	if err != nil {
		return cmdError("mstfwreset", args, out, errb, err)
	}
	return nil
}

// Result is what Apply did.
type Result struct {
	Burned    bool
	Activated bool // running version verified equal to the image's
	// RebootRequired: flash holds the image; a host reboot loads it.
	RebootRequired bool
	Final          *Query // device query after the last step
	Notes          []string
}

// Apply executes p: burn (PSID re-checked), verify flash, activate per act,
// verify running.
func (t *Tool) Apply(ctx context.Context, p *Plan, image string, act Activation) (*Result, error) {
	r := &Result{}
	if p.Noop() {
		return r, nil
	}
	if p.Burn {
		if !strings.EqualFold(p.DevicePSID, p.ImagePSID) || p.DevicePSID == "" {
			return nil, &PSIDMismatchError{Device: p.Device, DevicePSID: p.DevicePSID, ImagePSID: p.ImagePSID, Image: image}
		}
		t.log().Info("mstflint burn", "device", p.Device, "image", image, "from", p.Flash, "to", p.ImageVersion)
		if err := t.burn(ctx, p.Device, image); err != nil {
			return nil, err
		}
		r.Burned = true
		q, err := t.QueryDevice(ctx, p.Device)
		if err != nil {
			return r, fmt.Errorf("after burn: %w", err)
		}
		r.Final = q
		if q.FWVersion != p.ImageVersion {
			return r, fmt.Errorf("after burn %s: flash reports FW %s, expected %s", p.Device, q.FWVersion, p.ImageVersion)
		}
	}
	switch act {
	case ActivateNone:
		r.Notes = append(r.Notes, "activation not requested: the image loads at the next reboot")
		r.RebootRequired = true
		return r, nil
	case ActivateReboot:
		r.RebootRequired = true
		return r, nil
	case ActivateReset:
		// below: reset the device now
	}
	if err := t.Reset(ctx, p.Device); err != nil {
		// mstfwreset refuses when a reset level is unsupported or a driver
		// holds the device; a reboot loads the flash image anyway.
		t.log().Warn("mstfwreset failed; reboot required", "device", p.Device, "err", err)
		r.RebootRequired = true
		r.Notes = append(r.Notes, "mstfwreset failed, reboot required: "+err.Error())
		return r, nil
	}
	q, err := t.QueryDevice(ctx, p.Device)
	if err != nil {
		return r, fmt.Errorf("after mstfwreset: %w", err)
	}
	r.Final = q
	if q.Running() != p.ImageVersion {
		return r, fmt.Errorf("after mstfwreset %s: running FW %s, expected %s", p.Device, q.Running(), p.ImageVersion)
	}
	r.Activated = true
	return r, nil
}

// Update checks tool and device (SkipError when absent), queries both,
// plans and applies. want is the manifest's version ("" to trust the image).
func (t *Tool) Update(ctx context.Context, pci, image, want string, act Activation) (*Plan, *Result, error) {
	if err := t.Available(); err != nil {
		return nil, nil, err
	}
	addr, err := NormalizePCI(pci)
	if err != nil {
		return nil, nil, err
	}
	if err := t.DevicePresent(addr); err != nil {
		return nil, nil, err
	}
	dev, err := t.QueryDevice(ctx, addr)
	if err != nil {
		return nil, nil, err
	}
	img, err := t.QueryImage(ctx, image)
	if err != nil {
		return nil, nil, err
	}
	p, err := PlanUpdate(addr, image, dev, img, want)
	if err != nil {
		return nil, nil, err
	}
	t.log().Info("mstflint plan", "plan", p.String())
	r, err := t.Apply(ctx, p, image, act)
	return p, r, err
}
