package wipe

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/cure-oss/cure/tools/ata"
	"github.com/cure-oss/cure/tools/nvme"
	"github.com/cure-oss/cure/tools/opal"
)

// Handles are the device seams for one disk. Fields a disk does not have
// stay nil: Admin for non-NVMe, ATA for non-SATA, Opal when the kernel
// has no sed-opal.
type Handles struct {
	Block     Block                  // the whole-disk block device
	Opal      opal.Ioctler           // sed-opal ioctls on the block device
	Security  opal.SecurityTransport // Level 0 Discovery (after a revert)
	Admin     nvme.Admin             // the NVMe controller
	Namespace *nvme.Namespace        // Identify Namespace of the target
	ATA       ata.Transport          // ATA PASS-THROUGH (16) on a SATA disk
}

// Credentials are the secrets for one disk, looked up by serial.
type Credentials struct {
	PSID string // from the drive label, imported with the node inventory
	SID  string
}

// Options tune the executor; zero values take the defaults.
type Options struct {
	Samples        int           // random 4 KiB marker blocks besides first/last MiB; default 16
	Rand           io.Reader     // marker token source; default crypto/rand
	SanitizePoll   time.Duration // default 2 s
	SanitizeBudget time.Duration // default 6 h
	Log            *slog.Logger
	// AllowDestructive is the caller's grant to write the disk. The
	// device library does not know modes; the caller decides (the runner:
	// modes.CheckWipe) and Execute refuses without it, before any write.
	AllowDestructive bool
}

// Attempt is one method tried.
type Attempt struct {
	Method   Method        `json:"method"`
	Duration time.Duration `json:"duration"`
	Error    string        `json:"error,omitempty"`
}

// Result is the per-disk verdict.
type Result struct {
	Disk     string        `json:"disk"`
	Serial   string        `json:"serial"`
	Method   Method        `json:"method"` // the method that erased the disk
	Attempts []Attempt     `json:"attempts"`
	Erase    time.Duration `json:"eraseDuration"`
	Total    time.Duration `json:"totalDuration"`
	Verified bool          `json:"verified"`
	// ReadsZeros: every sampled region read back as zeros after the
	// erase. A hint for the installer (skip zero blocks), not a proof:
	// the installer's full read-back is what catches a wrong hint.
	ReadsZeros bool     `json:"readsZeros"`
	Marker     string   `json:"marker,omitempty"` // token hex; worthless once erased
	Evidence   []string `json:"evidence"`
}

// Execute applies p to the disk behind h and verifies it. The returned
// Result is filled as far as the run got, also on error.
func Execute(ctx context.Context, p Plan, h Handles, cred Credentials, o Options) (*Result, error) {
	start := time.Now()
	res := &Result{Disk: p.Disk.Name, Serial: p.Disk.Serial, Method: MethodNone}
	o = o.withDefaults()
	log := o.Log.With("disk", p.Disk.Name, "serial", p.Disk.Serial)
	fail := func(format string, a ...any) (*Result, error) {
		res.Total = time.Since(start)
		return res, fmt.Errorf("wipe %s (serial %q): %s", p.Disk.Name, p.Disk.Serial, fmt.Sprintf(format, a...))
	}
	if !o.AllowDestructive && p.Method != MethodNone {
		return fail("refused: the caller did not grant AllowDestructive (only provision and wipe modes erase disks)")
	}
	if p.Method == MethodNone {
		res.Verified = true
		res.Evidence = append(res.Evidence, "policy none: nothing erased")
		return res, nil
	}
	if p.Disk.BootMedium || p.Disk.ReadOnly {
		return fail("refusing: boot medium or read-only disk in a plan")
	}
	if h.Block == nil {
		return fail("no block device handle")
	}
	mk, err := writeMarker(h, o, res)
	if err != nil {
		return fail("%v", err)
	}
	used, err := erase(ctx, p, h, cred, o, log, res)
	if err != nil {
		return fail("%v", err)
	}
	verified, err := verifyErase(used.Method, mk, h, res)
	if err != nil {
		return fail("%v", err)
	}
	res.Verified = verified
	res.Total = time.Since(start)
	if !verified {
		return fail("verification failed: %s", failedEvidence(res.Evidence))
	}
	log.Info("wipe: verified", "method", res.Method, "erase", res.Erase, "total", res.Total)
	return res, nil
}

func (o Options) withDefaults() Options {
	if o.Samples == 0 {
		o.Samples = 16
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	if o.SanitizePoll == 0 {
		o.SanitizePoll = 2 * time.Second
	}
	if o.SanitizeBudget == 0 {
		o.SanitizeBudget = 6 * time.Hour
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o
}

// writeMarker writes the marker the verification looks for (nil when
// skipped). A locked Opal drive refuses writes; its data is already
// unreadable and the revert is proven through the Opal state instead.
func writeMarker(h Handles, o Options, res *Result) (*marker, error) {
	if locked, why := lockedOpal(h); locked {
		res.Evidence = append(res.Evidence, "marker skipped: "+why)
		return nil, nil
	}
	m, err := planMarker(h.Block.Size(), o.Samples, o.Rand)
	if err != nil {
		return nil, err
	}
	if err := m.write(h.Block); err != nil {
		return nil, fmt.Errorf("before erasing: %w", err)
	}
	res.Marker = m.TokenHex()
	res.Evidence = append(res.Evidence, fmt.Sprintf("marker %s written and read back at %d regions (first MiB, last MiB, %d random 4 KiB blocks)",
		m.TokenHex(), len(m.Regions), len(m.Regions)-2))
	return m, nil
}

// erase runs the first step that the drive accepts. Only "unsupported"
// outcomes move on to the next step; anything else (a rejected PSID, a
// media error) stops the run, because continuing would hide it.
func erase(ctx context.Context, p Plan, h Handles, cred Credentials, o Options, log *slog.Logger, res *Result) (*Step, error) {
	eraseStart := time.Now()
	var used *Step
	for _, s := range p.Steps() {
		t0 := time.Now()
		log.Info("wipe: erasing", "method", s.Method, "reason", s.Reason)
		ev, err := apply(ctx, s.Method, p, h, cred, o, log)
		res.Evidence = append(res.Evidence, ev...)
		a := Attempt{Method: s.Method, Duration: time.Since(t0)}
		if err != nil {
			a.Error = err.Error()
		}
		res.Attempts = append(res.Attempts, a)
		if err == nil {
			used = &s
			break
		}
		if !unsupported(err) {
			return nil, fmt.Errorf("%s: %w", s.Method, err)
		}
		log.Warn("wipe: method unsupported by the drive, trying the next planned one", "method", s.Method, "err", err)
	}
	res.Erase = time.Since(eraseStart)
	if used == nil {
		return nil, fmt.Errorf("every planned method was rejected as unsupported: %s", attemptsString(res.Attempts))
	}
	res.Method = used.Method
	res.Evidence = append(res.Evidence, fmt.Sprintf("erased with %s in %s: %s", used.Method, res.Erase.Round(time.Millisecond), used.Reason))
	return used, nil
}

// verifyErase confirms a revert through the Opal state and checks that
// no marker survived (mk nil: none was written).
func verifyErase(method Method, mk *marker, h Handles, res *Result) (bool, error) {
	verified := true
	if method == MethodPSIDRevert || method == MethodSIDRevert {
		if h.Security == nil {
			return false, errors.New("no security transport to confirm the revert")
		}
		d, err := opal.Discover(h.Security)
		if err != nil {
			return false, fmt.Errorf("after revert: %w", err)
		}
		ok, why := d.FactoryState()
		res.Evidence = append(res.Evidence, fmt.Sprintf("opal after revert: factory=%t (%s); %s", ok, why, d.Summary()))
		verified = verified && ok
	}
	if mk != nil {
		ev, survivors, zeros, err := mk.check(h.Block)
		res.Evidence = append(res.Evidence, ev...)
		if err != nil {
			return false, fmt.Errorf("verify: %w", err)
		}
		verified = verified && survivors == 0
		res.ReadsZeros = zeros
	}
	return verified, nil
}

func lockedOpal(h Handles) (bool, string) {
	if h.Security == nil {
		return false, ""
	}
	d, err := opal.Discover(h.Security)
	if err != nil || d.Locking == nil {
		return false, ""
	}
	if d.Locking.Locked {
		return true, "Opal reports a locked range (" + d.Summary() + ")"
	}
	return false, ""
}

// apply runs one method, returning evidence lines the method itself
// produced (also on failure).
func apply(ctx context.Context, m Method, p Plan, h Handles, cred Credentials, o Options, log *slog.Logger) ([]string, error) {
	if m == MethodATAEnhanced || m == MethodATANormal {
		if h.ATA == nil {
			return nil, fmt.Errorf("%w: no ATA pass-through handle", ata.ErrUnsupported)
		}
		return ataSecurityErase(ctx, h.ATA, m == MethodATAEnhanced, log)
	}
	return nil, applyOpalNVMe(ctx, m, p, h, cred, o)
}

func applyOpalNVMe(ctx context.Context, m Method, p Plan, h Handles, cred Credentials, o Options) error {
	needAdmin := func() error {
		if h.Admin == nil {
			return fmt.Errorf("no NVMe controller handle")
		}
		return nil
	}
	switch m {
	case MethodPSIDRevert, MethodSIDRevert:
		if h.Opal == nil {
			return fmt.Errorf("%w: no sed-opal device handle", opal.ErrNoTCG)
		}
		if m == MethodPSIDRevert {
			return opal.PSIDRevert(h.Opal, cred.PSID)
		}
		return opal.RevertTPer(h.Opal, cred.SID)
	case MethodSanitizeCrypto, MethodSanitizeBlock:
		if err := needAdmin(); err != nil {
			return err
		}
		act := nvme.SanitizeCryptoErase
		if m == MethodSanitizeBlock {
			act = nvme.SanitizeBlockErase
		}
		if err := nvme.Sanitize(h.Admin, act, false); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, o.SanitizeBudget)
		defer cancel()
		_, err := nvme.WaitSanitize(ctx, h.Admin, o.SanitizePoll)
		return err
	case MethodFormatCrypto, MethodFormatUserData:
		if err := needAdmin(); err != nil {
			return err
		}
		if h.Namespace == nil || p.NSID == 0 {
			return fmt.Errorf("format needs the namespace's Identify data and NSID")
		}
		ses := nvme.SESUserData
		if m == MethodFormatCrypto {
			ses = nvme.SESCrypto
		}
		return nvme.FormatNVM(h.Admin, p.NSID, nvme.FormatOptionsFor(h.Namespace, ses))
	case MethodNone, MethodATAEnhanced, MethodATANormal:
		// ATA methods run in apply; none is no method
	}
	return fmt.Errorf("unknown method %q", m)
}

// unsupported reports outcomes meaning "this drive does not do that
// command", as opposed to "it tried and failed".
func unsupported(err error) bool {
	if errors.Is(err, errATAPasswordSet) {
		return false // the drive's security state was touched: stop and say so
	}
	if errors.Is(err, opal.ErrNoTCG) || errors.Is(err, ata.ErrUnsupported) {
		return true
	}
	var st *nvme.StatusError
	if errors.As(err, &st) {
		// Invalid Command Opcode, Invalid Field in Command (e.g. an
		// unsupported SANACT or SES), Invalid Format.
		return st.SCT == nvme.SCTGeneric && (st.SC == 0x01 || st.SC == 0x02) ||
			st.SCT == nvme.SCTCommandSpecific && st.SC == 0x0a
	}
	return false
}

func attemptsString(as []Attempt) string {
	s := ""
	for i, a := range as {
		if i > 0 {
			s += "; "
		}
		s += string(a.Method) + ": " + a.Error
	}
	return s
}

// failedEvidence is the first evidence line that shows the failure.
func failedEvidence(ev []string) string {
	for _, e := range ev {
		if strings.Contains(e, "STILL PRESENT") || strings.Contains(e, "factory=false") {
			return e
		}
	}
	return "no evidence line explains it"
}
