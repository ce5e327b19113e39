package bluefield

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/cure-oss/cure/tools/mstflint"
)

// bfbMagic starts every BFB image header ("Bf\x02\x13", little endian;
// BFB_IMGHDR_MAGIC in ATF's bluefield_boot.h).
const bfbMagic = 0x13026642

// NICQuerier reads the DPU's NIC firmware (tools/mstflint.Tool).
type NICQuerier interface {
	QueryDevice(ctx context.Context, pci string) (*mstflint.Query, error)
}

// Status is what the host can observe of a DPU.
type Status struct {
	Misc     *Misc
	State    State
	Versions Versions        // from log lines that carry them, if any
	NIC      *mstflint.Query // nil when not queried
}

// Query reads misc and, when nic is not nil and DEV_NAME names a PCI
// function, the DPU's NIC firmware through mstflint.
func Query(ctx context.Context, r Rshim, nic NICQuerier) (*Status, error) {
	b, err := r.ReadMisc()
	if err != nil {
		return nil, err
	}
	m, err := ParseMisc(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Name(), err)
	}
	st := &Status{Misc: m, Versions: ParseVersions(b)}
	st.State, _ = LogState(m.Log)
	if nic != nil {
		pci := m.PCI()
		if pci == "" {
			return nil, fmt.Errorf("%s: DEV_NAME %q names no PCI function to query the NIC firmware of", r.Name(), m.DevName)
		}
		q, err := nic.QueryDevice(ctx, pci)
		if err != nil {
			return nil, fmt.Errorf("%s: DPU NIC firmware: %w", r.Name(), err)
		}
		st.NIC = q
	}
	return st, nil
}

// Want is what the manifest asks of a DPU; empty fields are not checked.
type Want struct {
	NICFW string // DPU NIC firmware, e.g. 32.43.1014
	BSP   string // BlueField BSP version, e.g. 4.9.1.13442
}

// Plan is the DPU delta, as data.
type Plan struct {
	Rshim   string
	Install bool
	Reasons []string
}

// PlanInstall decides whether the bundle must be installed. A wanted
// version the host cannot observe counts as drift: installing a bundle is
// idempotent, skipping one that was needed is not.
func PlanInstall(r string, st *Status, w Want) (*Plan, error) {
	if w.NICFW == "" && w.BSP == "" {
		return nil, fmt.Errorf("plan dpu %s: nothing to compare: want neither NIC firmware nor BSP version", r)
	}
	p := &Plan{Rshim: r}
	check := func(what, have, want string) {
		switch {
		case want == "":
		case have == "":
			p.Install = true
			p.Reasons = append(p.Reasons, fmt.Sprintf("%s not observable from the host; want %s", what, want))
		case have != want:
			p.Install = true
			p.Reasons = append(p.Reasons, fmt.Sprintf("%s %s, want %s", what, have, want))
		default:
			p.Reasons = append(p.Reasons, fmt.Sprintf("%s %s matches", what, have))
		}
	}
	nic := ""
	if st.NIC != nil {
		nic = st.NIC.Running()
	}
	check("NIC firmware", nic, w.NICFW)
	check("BSP", st.Versions.BSP, w.BSP)
	if st.State == StateFailed {
		p.Install = true
		p.Reasons = append(p.Reasons, "the DPU's boot log reports a failure")
	}
	return p, nil
}

// WaitOptions bound waiting for the DPU.
type WaitOptions struct {
	Poll time.Duration // default 5 s
	Log  *slog.Logger
}

// Progress is told bytes written and the total (-1 if unknown).
type Progress func(written, total int64)

// Install streams a .bfb into the boot device and waits until the DPU
// reports "DPU is ready" (or an error line, or ctx ends). bfb is checked
// for the BFB magic before anything is written.
func Install(ctx context.Context, r Rshim, bfb io.Reader, size int64, progress Progress, o WaitOptions) ([]string, error) {
	br := bufio.NewReaderSize(bfb, 1<<20)
	head, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("install bfb on %s: reading header: %w", r.Name(), err)
	}
	if m := binary.LittleEndian.Uint32(head); m != bfbMagic {
		return nil, fmt.Errorf("install bfb on %s: not a BFB image: magic %#08x, expected %#08x", r.Name(), m, bfbMagic)
	}
	// Level 2 puts the boot log in misc; the baseline lets the wait tell
	// new lines from a previous boot's.
	if err := r.WriteMisc("DISPLAY_LEVEL 2"); err != nil {
		return nil, err
	}
	base, err := logLines(r)
	if err != nil {
		return nil, err
	}
	w, err := r.OpenBoot()
	if err != nil {
		return nil, err
	}
	n, err := copyCtx(ctx, w, br, size, progress)
	if cerr := w.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close rshim boot: %w", cerr)
	}
	if err != nil {
		return nil, fmt.Errorf("install bfb on %s: after %d bytes: %w", r.Name(), n, err)
	}
	if size >= 0 && n != size {
		return nil, fmt.Errorf("install bfb on %s: wrote %d bytes, expected %d", r.Name(), n, size)
	}
	lg(o).Info("bfb pushed; waiting for the DPU", "rshim", r.Name(), "bytes", n)
	return WaitReady(ctx, r, base, o)
}

// Reset resets the DPU's Arm side ("SW_RESET 1") and waits until it is
// ready again.
func Reset(ctx context.Context, r Rshim, o WaitOptions) ([]string, error) {
	if err := r.WriteMisc("DISPLAY_LEVEL 2"); err != nil {
		return nil, err
	}
	base, err := logLines(r)
	if err != nil {
		return nil, err
	}
	if err := r.WriteMisc("SW_RESET 1"); err != nil {
		return nil, err
	}
	return WaitReady(ctx, r, base, o)
}

// WaitReady polls misc until the log lines written after base say ready
// or failed, and returns those lines. Whether the driver clears the log on
// a reset or keeps appending, both are handled: while the log still starts
// with base only the lines after it count; once it no longer does (it was
// cleared), every line counts.
func WaitReady(ctx context.Context, r Rshim, base []string, o WaitOptions) ([]string, error) {
	poll := o.Poll
	if poll <= 0 {
		poll = 5 * time.Second
	}
	var fresh []string
	state := StateUnknown
	for {
		lines, err := logLines(r)
		if err != nil {
			// misc can be briefly unreadable while the driver resets the device.
			lg(o).Warn("rshim misc unreadable", "rshim", r.Name(), "err", err)
		} else {
			if base != nil && !hasPrefix(lines, base) {
				base = nil // the log restarted
			}
			fresh = lines[len(base):]
			var failure string
			state, failure = LogState(fresh)
			switch state {
			case StateReady:
				return fresh, nil
			case StateFailed:
				return fresh, fmt.Errorf("dpu %s: boot log reports %q (log: %s)", r.Name(), failure, tail(fresh))
			case StateUnknown, StateBooting, StateInstalling:
				// not there yet: poll again
			}
		}
		select {
		case <-ctx.Done():
			return fresh, fmt.Errorf("dpu %s: not ready (state %s) before %v; log: %s", r.Name(), state, ctx.Err(), tail(fresh))
		case <-time.After(poll):
		}
	}
}

func hasPrefix(lines, base []string) bool {
	if len(lines) < len(base) {
		return false
	}
	for i := range base {
		if base[i] != lines[i] {
			return false
		}
	}
	return true
}

func lg(o WaitOptions) *slog.Logger {
	if o.Log == nil {
		return slog.Default()
	}
	return o.Log
}

func logLines(r Rshim) ([]string, error) {
	b, err := r.ReadMisc()
	if err != nil {
		return nil, err
	}
	m, err := ParseMisc(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Name(), err)
	}
	return m.Log, nil
}

func tail(lines []string) string {
	if len(lines) == 0 {
		return "(no new lines)"
	}
	return strings.Join(lines[max(0, len(lines)-5):], " | ")
}

// copyCtx copies in 1 MiB pieces, checking ctx and reporting progress.
func copyCtx(ctx context.Context, w io.Writer, r io.Reader, total int64, progress Progress) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, rerr := r.Read(buf)
		if k > 0 {
			wk, werr := w.Write(buf[:k])
			n += int64(wk)
			if werr != nil {
				return n, fmt.Errorf("write rshim boot: %w", werr)
			}
			if progress != nil {
				progress(n, total)
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, fmt.Errorf("read bfb: %w", rerr)
		}
	}
}
