// Package timebuckets splits a run's wall time into the buckets an
// optimizer needs (queue, BMC operations, boot into CURE and its steps,
// each firmware phase with its reboots, the OS install and its stages,
// boot into the installed OS, retries, coordinator overhead), computed from
// the stored timeline only: a pure function of the run, its phase records
// and its events, so any report, the dashboard and the fleet summary agree.
//
// The top-level buckets partition [run start, run end] exactly: their sum is
// the run's wall time. Only the coordinator's clock places boundaries (phase
// records, coordinator events); what the node reports (its uptime at Hello,
// its install stage durations) is used as durations inside a bucket, clamped
// to it, never to move a boundary.
package timebuckets

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Bucket names.
const (
	Queued          = "queued"            // request accepted → first phase started
	BMCOps          = "bmc_operations"    // preflight, boot overrides, power on
	BootToCURE      = "boot_to_cure"      // power-on → PXE → runner registered
	FirmwarePOST    = "firmware_post"     // (boot_to_cure) power-on → iPXE script served
	IPXEDownload    = "ipxe_download"     // (boot_to_cure) script → kernel started (kernel and initrd download)
	KernelAndRunner = "kernel_and_runner" // (boot_to_cure) kernel start → runner Hello
	Registration    = "registration"      // (boot_to_cure) Hello → phase end
	FirmwarePrefix  = "firmware/"         // one per firmware phase (bmc, bios, ..., sed_revert)
	OSInstall       = "os_install"
	ImageStream     = "image_stream"   // (os_install) download + decode + write, from a runner that does not split them
	ImageDownload   = "image_download" // (os_install) the stream held up by the network (and each chunk's sha256)
	ImageDecode     = "image_decode"   // (os_install) the stream held up by decompression
	ImageWrite      = "image_write"    // (os_install) the stream held up by the disk (writes, fsync)
	ImageReadback   = "image_readback" // (os_install) read-back verification
	InstallOther    = "install_other"  // (os_install) planning, seed, partition table, reporting
	BootInstalledOS = "boot_installed_os"
	RebootRequest   = "reboot_request"      // (boot_installed_os) phase start → reboot sent
	OSBootCallback  = "os_boot_to_callback" // (boot_installed_os) reboot → the installed OS called back
	RetryPrefix     = "retry/"              // time before a phase's last attempt: failed attempts and backoff
	Overhead        = "coordinator"         // between phases, nothing else to blame
	Finish          = "finish"              // last phase end → run end
	PhasePrefix     = "phase/"              // any other phase (validate, power_off...)
	Unattributed    = "unattributed"        // (any) part of a bucket whose steps the timeline does not show
)

// Bucket is a span of a run's wall time.
type Bucket struct {
	Name     string
	Duration time.Duration
	// Reboots of the node inside this bucket (firmware activation, BIOS
	// settings, power-on).
	Reboots int
	// Attempts of the phase (phase buckets; 0 otherwise).
	Attempts int
	// Sub partitions Duration, when known.
	Sub []Bucket
}

// Breakdown is a run split into buckets.
type Breakdown struct {
	RunID, NodeID string
	Mode          modes.Mode
	Status        curev1.RunStatus
	Wall          time.Duration
	Buckets       []Bucket // in order of first appearance
}

// Total is the sum of the top-level buckets (equal to Wall).
func (b Breakdown) Total() time.Duration {
	var d time.Duration
	for _, x := range b.Buckets {
		d += x.Duration
	}
	return d
}

// Get returns the bucket named name (top level or sub), ok=false if absent.
func (b Breakdown) Get(name string) (Bucket, bool) {
	for _, x := range b.Buckets {
		if x.Name == name {
			return x, true
		}
		for _, s := range x.Sub {
			if s.Name == name {
				return s, true
			}
		}
	}
	return Bucket{}, false
}

// phaseBucket names the bucket of a phase.
func phaseBucket(phase modes.PhaseName) string {
	switch phase {
	case modes.Preflight, modes.SetBootPXE, modes.PoweringOn, modes.SetBootDisk:
		return BMCOps
	case modes.WaitForCURE:
		return BootToCURE
	case modes.BMC, modes.BIOS, modes.BIOSSettings, modes.HGX, modes.NIC, modes.DPU, modes.NVMe, modes.SEDRevert:
		return FirmwarePrefix + string(phase)
	case modes.OSInstall:
		return OSInstall
	case modes.WaitForHostOS:
		return BootInstalledOS
	case modes.Hardware, modes.Validate, modes.PowerOffAtEnd:
	}
	return PhasePrefix + string(phase)
}

// Message prefixes of the coordinator events the buckets read (written by
// pipeline and server: keep them in step).
const (
	msgReboot     = "re-armed PXE once and reset the host"
	msgHostReboot = "rebooting into the installed OS"
	msgIPXE       = "iPXE script served"
	msgHello      = "runner connected"
)

var uptimeRE = regexp.MustCompile(`guest_uptime=(\d+)ms`)

// StageMetric is the runner metric that carries an install stage's
// duration in seconds, its stage label naming it (stream, readback).
const StageMetric = "os_install.stage_seconds"

var stageRE = regexp.MustCompile(`^` + regexp.QuoteMeta(StageMetric) + `=([0-9.eE+-]+)s\b.*\bstage=(stream|download|decode|write|readback)\b`)

type span struct {
	name       string
	start, end time.Time
	phase      *store.Phase
}

// Compute splits run into buckets. now ends a run still going.
func Compute(run store.Run, phases []store.Phase, events []store.Event, now time.Time) Breakdown {
	end := run.EndedAt
	if end.IsZero() {
		end = now
	}
	start := run.StartedAt
	if end.Before(start) {
		end = start
	}
	out := Breakdown{RunID: run.ID, NodeID: run.NodeID, Mode: run.Mode, Status: run.Status, Wall: end.Sub(start)}

	ps := slices.Clone(phases)
	ps = slices.DeleteFunc(ps, func(p store.Phase) bool { return p.StartedAt.IsZero() })
	slices.SortStableFunc(ps, func(a, b store.Phase) int { return a.StartedAt.Compare(b.StartedAt) })

	var spans []span
	// Gaps of no length are left out; a phase is kept even when it took no
	// measurable time (stored times are milliseconds), so it always shows.
	add := func(name string, a, b time.Time, p *store.Phase) {
		a, b = clampT(a, start, end), clampT(b, start, end)
		if b.After(a) || (p != nil && !b.Before(a)) {
			spans = append(spans, span{name, a, b, p})
		}
	}
	cursor := start
	for i := range ps {
		p := &ps[i]
		pStart := p.StartedAt
		if pStart.Before(cursor) {
			pStart = cursor
		}
		gap := Overhead
		switch {
		case i == 0 && p.Attempts <= 1:
			gap = Queued
		case p.Attempts > 1:
			gap = RetryPrefix + string(p.Name)
		}
		add(gap, cursor, pStart, nil)
		pEnd := p.EndedAt
		if pEnd.IsZero() || p.Status == curev1.PhaseStatus_PHASE_RUNNING {
			pEnd = end
		}
		if pEnd.Before(pStart) {
			pEnd = pStart
		}
		add(phaseBucket(p.Name), pStart, pEnd, p)
		if pEnd.After(cursor) {
			cursor = clampT(pEnd, start, end)
		}
	}
	if len(ps) == 0 {
		add(Queued, cursor, end, nil)
	} else {
		add(Finish, cursor, end, nil)
	}

	reboots := rebootsByPhase(events)
	for _, s := range spans {
		d := s.end.Sub(s.start)
		i := slices.IndexFunc(out.Buckets, func(b Bucket) bool { return b.Name == s.name })
		if i < 0 {
			out.Buckets = append(out.Buckets, Bucket{Name: s.name})
			i = len(out.Buckets) - 1
		}
		b := &out.Buckets[i]
		b.Duration += d
		if s.phase == nil {
			continue
		}
		b.Attempts += s.phase.Attempts
		b.Reboots += reboots[s.phase.Name]
		if s.phase.Name == modes.PoweringOn && s.phase.Status == curev1.PhaseStatus_PHASE_OK {
			b.Reboots++ // powering on (or the ForceRestart) is the boot into PXE
		}
		b.Sub = mergeSub(b.Sub, subBuckets(s, events))
	}
	// A bucket whose steps are known for one span but not another (a
	// wait_for_cure attempt with no Hello) keeps the rest as unattributed,
	// so the sub-buckets always add up to it.
	for i := range out.Buckets {
		b := &out.Buckets[i]
		if b.Sub == nil {
			continue
		}
		var sum time.Duration
		for _, s := range b.Sub {
			sum += s.Duration
		}
		if sum < b.Duration {
			b.Sub = mergeSub(b.Sub, []Bucket{{Name: Unattributed, Duration: b.Duration - sum}})
		}
	}
	return out
}

func clampT(t, lo, hi time.Time) time.Time {
	if t.Before(lo) {
		return lo
	}
	if t.After(hi) {
		return hi
	}
	return t
}

// rebootsByPhase counts the coordinator's reboot events per phase.
func rebootsByPhase(events []store.Event) map[modes.PhaseName]int {
	m := map[modes.PhaseName]int{}
	for _, e := range events {
		if e.Source == runstate.SourceCoordinator && e.Kind == runstate.EventInfo && (strings.HasPrefix(e.Message, msgReboot) || strings.HasPrefix(e.Message, msgHostReboot)) {
			m[e.Phase]++
		}
	}
	return m
}

func mergeSub(have, add []Bucket) []Bucket {
	for _, a := range add {
		if i := slices.IndexFunc(have, func(b Bucket) bool { return b.Name == a.Name }); i >= 0 {
			have[i].Duration += a.Duration
		} else {
			have = append(have, a)
		}
	}
	return have
}

// inWindow is the coordinator events of kind info inside [s.start, s.end]
// whose message starts with prefix.
func inWindow(s span, events []store.Event, prefix string) []store.Event {
	var out []store.Event
	for _, e := range events {
		if e.Source == runstate.SourceCoordinator && e.Kind == runstate.EventInfo && strings.HasPrefix(e.Message, prefix) && !e.Time.Before(s.start) && !e.Time.After(s.end) {
			out = append(out, e)
		}
	}
	return out
}

// subBuckets partitions a phase span where the timeline knows its steps.
func subBuckets(s span, events []store.Event) []Bucket {
	switch s.phase.Name {
	case modes.WaitForCURE:
		return bootSteps(s, events)
	case modes.WaitForHostOS:
		rb := inWindow(s, events, msgHostReboot)
		if len(rb) == 0 {
			return nil
		}
		t := rb[len(rb)-1].Time
		return partition(s.start, s.end, []mark{{s.start, RebootRequest}, {t, OSBootCallback}})
	case modes.OSInstall:
		return installStages(s, events)
	case modes.Preflight, modes.SetBootPXE, modes.PoweringOn, modes.Hardware, modes.BMC, modes.BIOS, modes.BIOSSettings, modes.HGX,
		modes.NIC, modes.DPU, modes.NVMe, modes.SEDRevert, modes.SetBootDisk, modes.Validate, modes.PowerOffAtEnd:
		// No steps known within: the phase is one bucket.
	}
	return nil
}

type mark struct {
	t    time.Time
	name string
}

// partition turns ordered marks into consecutive buckets over [a, b]; every
// name appears, even at zero length, so sub-buckets line up across runs.
func partition(a, b time.Time, marks []mark) []Bucket {
	var out []Bucket
	for i, m := range marks {
		from := clampT(m.t, a, b)
		to := b
		if i+1 < len(marks) {
			to = clampT(marks[i+1].t, from, b)
		}
		out = append(out, Bucket{Name: m.name, Duration: to.Sub(from)})
	}
	return out
}

// bootSteps splits wait_for_cure at the last iPXE script served and the
// runner's Hello (coordinator times); the kernel's start is the Hello's
// time minus the uptime the runner reported, kept between the two. A boot
// fast enough to register before the phase began (or a runner that was
// already there) counts as registration only.
func bootSteps(s span, events []store.Event) []Bucket {
	before := span{name: s.name, start: time.Time{}, end: s.end, phase: s.phase}
	hellos := inWindow(before, events, msgHello)
	if len(hellos) == 0 {
		return nil
	}
	hello := hellos[len(hellos)-1]
	var ipxe time.Time
	for _, e := range inWindow(before, events, msgIPXE) {
		if !e.Time.After(hello.Time) {
			ipxe = e.Time
		}
	}
	if ipxe.IsZero() || ipxe.Before(s.start) {
		ipxe = s.start // served before the phase (a boot the coordinator requested earlier)
	}
	kernel := ipxe
	if m := uptimeRE.FindStringSubmatch(hello.Message); m != nil {
		if ms, err := strconv.ParseInt(m[1], 10, 64); err == nil {
			kernel = clampT(hello.Time.Add(-time.Duration(ms)*time.Millisecond), ipxe, hello.Time)
		}
	}
	return partition(s.start, s.end, []mark{{s.start, FirmwarePOST}, {ipxe, IPXEDownload}, {kernel, KernelAndRunner}, {hello.Time, Registration}})
}

// stageReport reads an install stage's duration report (seconds); ok is
// false for other messages and for values out of range.
func stageReport(msg string) (stage string, secs float64, ok bool) {
	m := stageRE.FindStringSubmatch(msg)
	if m == nil {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil || v < 0 || v > 1e7 {
		return "", 0, false
	}
	return m[2], v, true
}

// installStages splits os_install by the stage durations the runner
// reported (the last report of each stage), scaled down if together they
// exceed the phase (a node's clock runs at its own pace).
func installStages(s span, events []store.Event) []Bucket {
	// The last report of each stage, in the order the buckets show them.
	names := map[string]string{"stream": ImageStream, "download": ImageDownload, "decode": ImageDecode, "write": ImageWrite, "readback": ImageReadback}
	order := []string{"stream", "download", "decode", "write", "readback"}
	vals := map[string]float64{}
	for _, e := range events {
		if e.Kind != runstate.EventMetric || e.Phase != modes.OSInstall {
			continue
		}
		if stage, v, ok := stageReport(e.Message); ok {
			vals[stage] = v
		}
	}
	if len(vals) == 0 {
		return nil
	}
	if _, split := vals["download"]; split {
		// A runner that splits the stream reports no "stream" of its own.
		delete(vals, "stream")
	}
	total := s.end.Sub(s.start)
	var ds []time.Duration
	var sum time.Duration
	var used []string
	for _, k := range order {
		v, ok := vals[k]
		if !ok {
			continue
		}
		d := time.Duration(v * float64(time.Second))
		ds = append(ds, d)
		used = append(used, k)
		sum += d
	}
	if sum > total {
		// The node's clock runs at its own pace: scale to the phase.
		f := float64(total) / float64(sum)
		sum = 0
		for i := range ds {
			ds[i] = time.Duration(float64(ds[i]) * f)
			sum += ds[i]
		}
		ds[len(ds)-1] += total - sum
		sum = total
	}
	var out []Bucket
	for i, k := range used {
		out = append(out, Bucket{Name: names[k], Duration: ds[i]})
	}
	return append(out, Bucket{Name: InstallOther, Duration: total - sum})
}

// RebootTimes is when the coordinator rebooted the node during the run: the
// end of a successful powering_on, and every reboot event (firmware
// activation, BIOS settings, recovery, the reboot into the installed OS).
func RebootTimes(phases []store.Phase, events []store.Event) []time.Time {
	var out []time.Time
	for _, p := range phases {
		if p.Name == modes.PoweringOn && p.Status == curev1.PhaseStatus_PHASE_OK && !p.EndedAt.IsZero() {
			out = append(out, p.EndedAt)
		}
	}
	for _, e := range events {
		if e.Source == runstate.SourceCoordinator && e.Kind == runstate.EventInfo && (strings.HasPrefix(e.Message, msgReboot) || strings.HasPrefix(e.Message, msgHostReboot)) {
			out = append(out, e.Time)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}
