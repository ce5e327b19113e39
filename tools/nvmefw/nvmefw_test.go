package nvmefw_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/nvme"
	"github.com/cure-oss/cure/tools/nvmefw"
	"github.com/cure-oss/cure/tools/nvmefw/nvmefwtest"
)

// ctrl returns Identify data and the slot log as the fake reports them, so
// plans are computed from real encoded bytes.
func ctrl(t *testing.T, f *nvmefwtest.Controller) (*nvme.Controller, *nvme.FirmwareLog) {
	t.Helper()
	c, log, err := nvmefw.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	return c, log
}

func sevenSlots() *nvmefwtest.Controller {
	f := &nvmefwtest.Controller{Model: "SAMSUNG MZWLO3T8HCLS-00A07", Serial: "S7X1NA0W", NumSlots: 7, Slot1RO: true, ActivateNow: true, FWUG: 0xff, Active: 2}
	f.Slots[0], f.Slots[1] = "GDC5102Q", "GDC7102Q"
	return f
}

func TestPlan(t *testing.T) {
	const img = 64 << 10
	cases := []struct {
		name   string
		f      func() *nvmefwtest.Controller
		target string
		opts   nvmefw.Options
		check  func(t *testing.T, p *nvmefw.Plan)
		err    string
	}{
		{name: "already running", f: sevenSlots, target: "GDC7102Q", check: func(t *testing.T, p *nvmefw.Plan) {
			if !p.Noop || p.Commit || p.Download {
				t.Errorf("plan = %+v, want noop", p)
			}
		}},
		{name: "empty slot, activate now", f: sevenSlots, target: "GDC7302Q", check: func(t *testing.T, p *nvmefw.Plan) {
			// slot 1 read-only, slot 2 running: slot 3 is the first empty writable one
			if p.Slot != 3 || p.Action != nvme.CommitReplaceActivateNow || p.After != nvmefw.AfterNothing || !p.Download {
				t.Errorf("plan = %+v", p)
			}
			if p.Chunk != 128<<10 {
				t.Errorf("chunk = %d, want 128 KiB (FWUG 0xFF, MDTS 0)", p.Chunk)
			}
		}},
		{name: "no activate-without-reset: action 1", f: func() *nvmefwtest.Controller {
			f := sevenSlots()
			f.ActivateNow = false
			return f
		}, target: "GDC7302Q", check: func(t *testing.T, p *nvmefw.Plan) {
			if p.Action != nvme.CommitReplaceActivate || p.After != nvmefw.AfterControllerReset {
				t.Errorf("action %d after %v", p.Action, p.After)
			}
		}},
		{name: "all slots used: replace an inactive one, not slot 1", f: func() *nvmefwtest.Controller {
			f := &nvmefwtest.Controller{NumSlots: 3, Slot1RO: true, Active: 3, FWUG: 0xff}
			f.Slots = [7]string{"A", "B", "C"}
			return f
		}, target: "D", check: func(t *testing.T, p *nvmefw.Plan) {
			if p.Slot != 2 {
				t.Errorf("slot = %d, want 2 (1 is read-only, 3 runs)", p.Slot)
			}
		}},
		{name: "single writable slot is replaced in place", f: func() *nvmefwtest.Controller {
			f := &nvmefwtest.Controller{NumSlots: 1, Active: 1, FWUG: 0xff}
			f.Slots[0] = "1.0"
			return f
		}, target: "2.0", check: func(t *testing.T, p *nvmefw.Plan) {
			if p.Slot != 1 || !strings.Contains(strings.Join(p.Reasons, ";"), "replaced in place") {
				t.Errorf("plan = %+v", p)
			}
		}},
		{name: "target in an inactive slot: activate without download", f: func() *nvmefwtest.Controller {
			f := sevenSlots()
			f.Slots[4] = "GDC7302Q"
			return f
		}, target: "GDC7302Q", check: func(t *testing.T, p *nvmefw.Plan) {
			if p.Download || !p.Commit || p.Slot != 5 || p.Action != nvme.CommitReplaceActivateNow {
				t.Errorf("plan = %+v", p)
			}
		}},
		{name: "target staged for next reset: only the reset is missing", f: func() *nvmefwtest.Controller {
			f := sevenSlots()
			f.Slots[2], f.Next = "GDC7302Q", 3
			return f
		}, target: "GDC7302Q", check: func(t *testing.T, p *nvmefw.Plan) {
			if p.Commit || p.Download || p.Slot != 3 || p.After != nvmefw.AfterControllerReset {
				t.Errorf("plan = %+v", p)
			}
		}},
		{name: "FWUG 8 under MDTS 5", f: func() *nvmefwtest.Controller {
			f := sevenSlots()
			f.FWUG, f.MDTS = 8, 5 // 32 KiB granularity, 128 KiB max transfer
			return f
		}, target: "X", check: func(t *testing.T, p *nvmefw.Plan) {
			if p.Chunk != 128<<10 || p.Chunk%(32<<10) != 0 {
				t.Errorf("chunk = %d", p.Chunk)
			}
		}},
		{name: "FWUG 0 unknown: 4 KiB", f: func() *nvmefwtest.Controller {
			f := sevenSlots()
			f.FWUG = 0
			return f
		}, target: "X", check: func(t *testing.T, p *nvmefw.Plan) {
			if p.Chunk != 4096 {
				t.Errorf("chunk = %d", p.Chunk)
			}
		}},
		{name: "FWUG larger than MDTS allows", f: func() *nvmefwtest.Controller {
			f := sevenSlots()
			f.FWUG, f.MDTS = 64, 2 // 256 KiB granularity, 16 KiB max transfer
			return f
		}, target: "X", err: "FWUG requires 262144-byte aligned transfers"},
		{name: "QEMU-like identify: refused with the evidence", f: qemuLike, target: "2.0",
			err: "OACS 0x0002 has bit 2 (Firmware Commit / Image Download) clear; Identify FRMW 0x03: 1 slot(s) and slot 1 is read-only"},
		{name: "QEMU-like identify, AllowUndeclared: slot 0", f: qemuLike, target: "2.0", opts: nvmefw.Options{AllowUndeclared: true},
			check: func(t *testing.T, p *nvmefw.Plan) {
				if p.Slot != 0 || !p.Download {
					t.Errorf("plan = %+v", p)
				}
			}},
		{name: "target longer than FR", f: sevenSlots, target: "123456789", err: "longer than the 8-byte"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, log := ctrl(t, tc.f())
			p, err := nvmefw.PlanUpdate(c, log, tc.target, img, tc.opts)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, p)
		})
	}
	c, log := ctrl(t, sevenSlots())
	if _, err := nvmefw.PlanUpdate(c, log, "X", 1001, nvmefw.Options{}); err == nil || !strings.Contains(err.Error(), "image size 1001") {
		t.Errorf("odd image size: err = %v", err)
	}
}

// qemuLike mirrors QEMU 7.2's Identify: FRMW = 1 slot | slot 1 read-only,
// OACS without the firmware bit.
func qemuLike() *nvmefwtest.Controller {
	f := &nvmefwtest.Controller{Model: "QEMU NVMe Ctrl", NumSlots: 1, Slot1RO: true, NoFirmwareCmd: true, Active: 1, Reject: true}
	f.Slots[0] = "7.2.22"
	return f
}

func update(t *testing.T, f *nvmefwtest.Controller, target string, image []byte, o nvmefw.UpdateOptions) (*nvmefw.Report, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o.Poll = 5 * time.Millisecond
	return nvmefw.Update(ctx, f, f, target, image, o)
}

func TestUpdateActivateNow(t *testing.T) {
	f := sevenSlots()
	f.FWUG = 2 // 8 KiB granularity
	image := nvmefwtest.Image("GDC7302Q", 20000)
	var last, calls int
	rep, err := update(t, f, "GDC7302Q", image, nvmefw.UpdateOptions{Plan: nvmefw.Options{MaxChunk: 8192}, Progress: func(done, total int) {
		if done <= last || total != len(image) {
			t.Errorf("progress %d/%d after %d", done, total, last)
		}
		last = done
		calls++
	}})
	if err != nil {
		t.Fatal(err)
	}
	if f.Running() != "GDC7302Q" || rep.Final == nil || rep.Final.FR != "GDC7302Q" || rep.RebootRequired {
		t.Fatalf("running %q, report %+v", f.Running(), rep)
	}
	if len(f.Resets) != 0 {
		t.Errorf("resets = %v, want none for commit action 3", f.Resets)
	}
	if calls != 3 || last != len(image) {
		t.Errorf("progress calls %d, last %d", calls, last)
	}
	// Every download offset is aligned to FWUG; the commit names slot 3, CA 3.
	var offsets []uint32
	for _, c := range f.Calls {
		switch c.Opcode {
		case nvme.OpFirmwareDownload:
			offsets = append(offsets, c.CDW11*4)
		case nvme.OpFirmwareCommit:
			if c.CDW10 != 3|3<<3 {
				t.Errorf("commit CDW10 = %#x, want slot 3 action 3", c.CDW10)
			}
		}
	}
	if want := []uint32{0, 8192, 16384}; !equal(offsets, want) {
		t.Errorf("download offsets = %v, want %v", offsets, want)
	}
	// Idempotent: a second run plans nothing and sends no firmware command.
	n := len(f.Calls)
	rep, err = update(t, f, "GDC7302Q", image, nvmefw.UpdateOptions{})
	if err != nil || !rep.Plan.Noop {
		t.Fatalf("second run: %v %+v", err, rep)
	}
	for _, c := range f.Calls[n:] {
		if c.Opcode == nvme.OpFirmwareDownload || c.Opcode == nvme.OpFirmwareCommit {
			t.Errorf("second run sent opcode %#x", c.Opcode)
		}
	}
}

func equal(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestUpdateResetPaths(t *testing.T) {
	cases := []struct {
		name        string
		activateNow bool
		require     uint8
		resets      []string
		status      uint16 // commit status reported, 0 for plain success
		reboot      bool
	}{
		{name: "action 1 then controller reset", resets: []string{"controller"}},
		{name: "0x111 controller level reset", activateNow: true, require: nvmefwtest.NeedsControllerReset, resets: []string{"controller"}, status: 0x4111},
		{name: "0x110 subsystem reset", activateNow: true, require: nvmefwtest.NeedsSubsystemReset, resets: []string{"subsystem"}, status: 0x4110},
		{name: "0x112 MTFA: re-commit with action 2", activateNow: true, require: nvmefwtest.NeedsMaxTimeViolation, resets: []string{"controller"}, status: 0x4112},
		{name: "0x10B conventional reset: reboot", activateNow: true, require: nvmefwtest.NeedsConventionalReset, status: 0x410b, reboot: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := sevenSlots()
			f.ActivateNow, f.RequireReset = tc.activateNow, tc.require
			f.ResetFailures = 2 // the kernel re-initialises the controller
			rep, err := update(t, f, "GDC7302Q", nvmefwtest.Image("GDC7302Q", 4096), nvmefw.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(f.Resets, ",") != strings.Join(tc.resets, ",") {
				t.Errorf("resets = %v, want %v", f.Resets, tc.resets)
			}
			var got uint16
			if rep.Result.Status != nil {
				got = rep.Result.Status.Status()
			}
			if got != tc.status {
				t.Errorf("commit status = %#x, want %#x", got, tc.status)
			}
			if rep.RebootRequired != tc.reboot {
				t.Errorf("RebootRequired = %v", rep.RebootRequired)
			}
			if tc.reboot {
				if f.Running() != "GDC7102Q" {
					t.Errorf("running %q before the reboot", f.Running())
				}
				f.PowerCycle()
				rep, err = update(t, f, "GDC7302Q", nvmefwtest.Image("GDC7302Q", 4096), nvmefw.UpdateOptions{})
				if err != nil || !rep.Plan.Noop {
					t.Fatalf("after reboot: %v %+v", err, rep.Plan)
				}
			} else if rep.Final == nil || rep.Final.FR != "GDC7302Q" || rep.Final.Log.ActiveSlot != 3 {
				t.Errorf("final = %+v", rep.Final)
			}
			if f.Running() != "GDC7302Q" {
				t.Errorf("running %q", f.Running())
			}
		})
	}
}

// QEMU 7.2 rejects Firmware Image Download with Invalid Command Opcode and
// DNR: status 0x4001. The error must carry it for the FAIL verdict.
func TestQEMURejection(t *testing.T) {
	for _, declared := range []bool{true, false} {
		f := qemuLike()
		o := nvmefw.UpdateOptions{Plan: nvmefw.Options{AllowUndeclared: true}}
		if declared {
			// A controller that claims support and still rejects.
			f.NoFirmwareCmd, f.NumSlots, f.Slot1RO = false, 2, true
		}
		_, err := update(t, f, "8.0.0", nvmefwtest.Image("8.0.0", 4096), o)
		var st *nvme.StatusError
		if !errors.As(err, &st) {
			t.Fatalf("declared=%v: err = %v, want a *nvme.StatusError", declared, err)
		}
		if st.Status() != 0x4001 || st.Opcode != nvme.OpFirmwareDownload || !st.InvalidOpcode() {
			t.Errorf("status %#x opcode %#x", st.Status(), st.Opcode)
		}
		if !strings.Contains(err.Error(), "Invalid Command Opcode") || !strings.Contains(err.Error(), "status 0x4001") {
			t.Errorf("message %q lacks the NVMe status", err)
		}
		if f.Running() != "7.2.22" {
			t.Errorf("running changed to %q", f.Running())
		}
	}
	// Without AllowUndeclared nothing is sent and the refusal says why.
	f := qemuLike()
	_, err := update(t, f, "8.0.0", nvmefwtest.Image("8.0.0", 4096), nvmefw.UpdateOptions{})
	var ue *nvmefw.UnsupportedError
	if !errors.As(err, &ue) || len(ue.Reasons) != 2 {
		t.Fatalf("err = %v", err)
	}
	for _, c := range f.Calls {
		if c.Opcode == nvme.OpFirmwareDownload {
			t.Error("download sent despite the refusal")
		}
	}
}

func TestApplyFailures(t *testing.T) {
	t.Run("image carries another revision", func(t *testing.T) {
		f := sevenSlots()
		_, err := update(t, f, "GDC7302Q", nvmefwtest.Image("GDC9999Q", 4096), nvmefw.UpdateOptions{})
		if err == nil || !strings.Contains(err.Error(), `slot 3 reports revision "GDC9999Q", expected "GDC7302Q"`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("invalid image", func(t *testing.T) {
		f := sevenSlots()
		_, err := update(t, f, "GDC7302Q", make([]byte, 4096), nvmefw.UpdateOptions{})
		var st *nvme.StatusError
		if !errors.As(err, &st) || st.Status() != 0x4107 || !strings.Contains(err.Error(), "rejected the image") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("cancelled mid-download", func(t *testing.T) {
		f := sevenSlots()
		c, log := ctrl(t, f)
		image := nvmefwtest.Image("GDC7302Q", 64<<10)
		p, err := nvmefw.PlanUpdate(c, log, "GDC7302Q", len(image), nvmefw.Options{MaxChunk: 4096})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		_, err = nvmefw.Apply(ctx, f, p, image, func(done, total int) {
			if done >= 8192 {
				cancel()
			}
		})
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "offset 8192") {
			t.Fatalf("err = %v", err)
		}
		for _, c := range f.Calls {
			if c.Opcode == nvme.OpFirmwareCommit {
				t.Error("commit issued after cancellation")
			}
		}
	})
	t.Run("plan/image size mismatch", func(t *testing.T) {
		f := sevenSlots()
		c, log := ctrl(t, f)
		p, _ := nvmefw.PlanUpdate(c, log, "GDC7302Q", 8192, nvmefw.Options{})
		_, err := nvmefw.Apply(context.Background(), f, p, make([]byte, 4096), nil)
		if err == nil || !strings.Contains(err.Error(), "8192-byte image, got 4096") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestVerifyMismatchIsImmediate(t *testing.T) {
	f := sevenSlots()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := nvmefw.Verify(ctx, f, "GDC7302Q", 3, 10*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), `running revision (Identify FR) is "GDC7102Q", expected "GDC7302Q"`) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > time.Second {
		t.Error("a mismatch was retried instead of reported")
	}
	// A controller that never answers is bounded by ctx.
	f.ResetFailures = 1 << 30
	_ = f.ResetController()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := nvmefw.Verify(ctx2, f, "GDC7102Q", 0, 10*time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("err = %v", err)
	}
}
