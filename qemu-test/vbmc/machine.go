package vbmc

import (
	"context"
	"fmt"
	"sync"
)

// BootDevice is the device a machine boots from first. The BMC picks it
// per boot from the boot override, so the choice is exact.
type BootDevice string

const (
	BootPxe BootDevice = "Pxe"
	BootHdd BootDevice = "Hdd"
	// BootUefiHttp is UEFI HTTP boot from the URI the BMC was given
	// (HttpBootUri): the machine implements HTTPBooter.
	BootUefiHttp BootDevice = "UefiHttp"
)

// EventKind says what happened to a running machine on its own (the guest
// asked for it, or the emulator died). Host-initiated stops emit nothing.
type EventKind string

const (
	GuestReset    EventKind = "GuestReset"
	GuestPoweroff EventKind = "GuestPoweroff"
	Exited        EventKind = "Exited"
)

// MachineEvent is reported on Machine.Events. After any event the machine is
// not running; the BMC decides whether to boot it again.
type MachineEvent struct {
	Kind EventKind
	// Boot is the sequence number of the Start call the event belongs to, so
	// the BMC can ignore a late event from a boot it already replaced.
	Boot uint64
	// Reason is the emulator's own wording (e.g. QMP "guest-reset").
	Reason string
	// Err is set for Exited when the emulator failed.
	Err error
}

// Machine is the seam between the BMC and whatever runs the "host":
// FakeMachine in tests, QEMUMachine for real boots.
type Machine interface {
	// Start powers the machine on and boots dev first. It fails if the
	// machine is already running.
	Start(ctx context.Context, dev BootDevice) error
	// Stop powers the machine off: force cuts power, otherwise the guest is
	// asked to shut down (implementations fall back to force after a grace
	// period). Stop on a stopped machine is a no-op.
	Stop(ctx context.Context, force bool) error
	Running() bool
	Events() <-chan MachineEvent
}

// FakeMachine is an in-memory Machine for driver tests: it records boots and
// lets the test play the guest (reset, poweroff, crash).
type FakeMachine struct {
	mu      sync.Mutex
	running bool
	seq     uint64
	boots   []BootDevice
	modes   []string
	uris    []string
	stops   []bool
	events  chan MachineEvent
	// StartErr, when set, makes the next Start fail with it.
	StartErr error
}

// NewFakeMachine returns a stopped fake machine.
func NewFakeMachine() *FakeMachine {
	return &FakeMachine{events: make(chan MachineEvent, 64)}
}

func (f *FakeMachine) Start(_ context.Context, dev BootDevice) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running {
		return fmt.Errorf("fake machine: start %s: already running", dev)
	}
	if err := f.StartErr; err != nil {
		f.StartErr = nil
		return err
	}
	f.seq++
	f.running = true
	f.boots = append(f.boots, dev)
	return nil
}

func (f *FakeMachine) Stop(_ context.Context, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.running {
		return nil
	}
	f.running = false
	f.stops = append(f.stops, force)
	return nil
}

func (f *FakeMachine) Running() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running
}

func (f *FakeMachine) Events() <-chan MachineEvent { return f.events }

// SetBootMode records the firmware mode of the next Start (ModeSetter).
func (f *FakeMachine) SetBootMode(mode string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.modes = append(f.modes, mode)
	return nil
}

// Modes lists the mode set before every Start so far.
func (f *FakeMachine) Modes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.modes...)
}

// Boots lists the devices of every Start so far.
func (f *FakeMachine) Boots() []BootDevice {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]BootDevice(nil), f.boots...)
}

// Stops lists the force flag of every Stop that powered the machine off.
func (f *FakeMachine) Stops() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bool(nil), f.stops...)
}

// GuestReset plays a guest that reboots itself.
func (f *FakeMachine) GuestReset() { f.guest(GuestReset, "guest-reset", nil) }

// GuestPoweroff plays a guest that powers itself off.
func (f *FakeMachine) GuestPoweroff() { f.guest(GuestPoweroff, "guest-shutdown", nil) }

// Crash plays an emulator that exits unexpectedly.
func (f *FakeMachine) Crash(err error) { f.guest(Exited, "exited", err) }

func (f *FakeMachine) guest(kind EventKind, reason string, err error) {
	f.mu.Lock()
	if !f.running {
		f.mu.Unlock()
		return
	}
	f.running = false
	ev := MachineEvent{Kind: kind, Boot: f.seq, Reason: reason, Err: err}
	f.mu.Unlock()
	f.events <- ev
}

// SetHTTPBootURI records the URI of the next UefiHttp Start (HTTPBooter).
func (f *FakeMachine) SetHTTPBootURI(uri string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.uris = append(f.uris, uri)
	return nil
}

// HTTPBootURIs lists the URI set before every UefiHttp Start so far.
func (f *FakeMachine) HTTPBootURIs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.uris...)
}
