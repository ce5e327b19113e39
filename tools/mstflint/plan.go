package mstflint

import (
	"fmt"
	"strings"
)

// Activation is how a burnt image becomes the running one.
type Activation int

const (
	// ActivateReset runs mstfwreset; if it cannot, the caller reboots.
	ActivateReset Activation = iota
	// ActivateReboot leaves activation to a host reboot.
	ActivateReboot
	// ActivateNone burns only (the image loads at some later reboot).
	ActivateNone
)

// Plan is the delta for one adapter, as data.
type Plan struct {
	Device       string // PCI address
	Running      string // version running now
	Flash        string // version on flash
	ImageVersion string // version in the image file
	DevicePSID   string
	ImagePSID    string
	Burn         bool // write the image to flash
	Activate     bool // load the flash image (reset or reboot)
	Reasons      []string
}

// Noop reports that the device already runs the image's version.
func (p *Plan) Noop() bool { return !p.Burn && !p.Activate }

func (p *Plan) String() string {
	switch {
	case p.Noop():
		return fmt.Sprintf("%s runs %s: nothing to do", p.Device, p.Running)
	case !p.Burn:
		return fmt.Sprintf("%s: %s on flash, running %s: activate only", p.Device, p.Flash, p.Running)
	}
	return fmt.Sprintf("%s: burn %s (PSID %s) over %s, then activate", p.Device, p.ImageVersion, p.ImagePSID, p.Flash)
}

// PSIDMismatchError refuses an image built for another board.
type PSIDMismatchError struct {
	Device, DevicePSID, ImagePSID, Image string
}

func (e *PSIDMismatchError) Error() string {
	return fmt.Sprintf("refusing to burn %s on %s: image PSID %s does not match device PSID %s (firmware for another board)",
		e.Image, e.Device, e.ImagePSID, e.DevicePSID)
}

// PlanUpdate compares the device query with the image query. want, when
// non-empty, is the version the manifest asks for: an image carrying
// another version is refused too. It is pure.
func PlanUpdate(pci, image string, dev, img *Query, want string) (*Plan, error) {
	p := &Plan{Device: pci, Running: dev.Running(), Flash: dev.FWVersion, ImageVersion: img.FWVersion,
		DevicePSID: dev.PSID, ImagePSID: img.PSID}
	if dev.PSID == "" || img.PSID == "" {
		return nil, fmt.Errorf("plan %s: PSID missing (device %q, image %s %q)", pci, dev.PSID, image, img.PSID)
	}
	if !strings.EqualFold(dev.PSID, img.PSID) {
		return nil, &PSIDMismatchError{Device: pci, DevicePSID: dev.PSID, ImagePSID: img.PSID, Image: image}
	}
	if img.FWVersion == "" {
		return nil, fmt.Errorf("plan %s: image %s reports no FW Version", pci, image)
	}
	if want != "" && img.FWVersion != want {
		return nil, fmt.Errorf("plan %s: image %s carries FW %s, the manifest wants %s", pci, image, img.FWVersion, want)
	}
	switch {
	case p.Running == img.FWVersion:
		p.Reasons = append(p.Reasons, fmt.Sprintf("running %s equals the image", p.Running))
	case p.Flash == img.FWVersion:
		p.Activate = true
		p.Reasons = append(p.Reasons, fmt.Sprintf("flash already holds %s (running %s): only a reset is missing", p.Flash, p.Running))
	default:
		p.Burn, p.Activate = true, true
		p.Reasons = append(p.Reasons, fmt.Sprintf("flash %s, running %s, image %s", p.Flash, p.Running, img.FWVersion))
	}
	return p, nil
}
