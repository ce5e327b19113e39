// Package hwerrors judges the host's own error reports over a boot: the
// machine checks the kernel logged (tools/mce) and the EDAC memory
// counters (tools/edac). A memory error is named by the DIMM it maps to
// (its slot and serial, from SMBIOS through tools/memmap, or the EDAC
// label's slot), any other machine check by CPU socket and bank; the
// kernel's own lines are attached as evidence.
package hwerrors

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/edac"
	"github.com/cure-oss/cure/tools/kmsg"
	"github.com/cure-oss/cure/tools/mce"
	"github.com/cure-oss/cure/tools/memmap"
)

// Check is the check name every verdict carries.
const Check = "hardware_errors"

// Options say where to read and how many corrected errors a part may have.
type Options struct {
	Root      string // holds sys/, proc/ ("/" on a node)
	KernelLog string // default Root/dev/kmsg
	// MaxCorrected is how many corrected errors one part may log before it
	// fails; 0, the default, fails on the first: a node under acceptance
	// has no business correcting memory errors.
	MaxCorrected uint64
	// MaxLines bounds the kernel log lines attached to one verdict (default 20).
	MaxLines int
}

// Observation is what one boot's logs and counters hold.
type Observation struct {
	MCEs      []mce.Record
	Log       []kmsg.Record // every hardware-error line (mce.Evidence)
	LogErr    error
	Counts    mce.Counts
	CountsErr error
	EDAC      edac.Summary
	EDACErr   error // edac.ErrNoEDAC: no driver
	Map       *memmap.Map
	MapErr    error
}

// Collect reads the kernel log, /proc/interrupts, EDAC and SMBIOS. It
// never fails as a whole: each source's error is kept for the verdicts.
func Collect(o Options) Observation {
	o = o.defaults()
	var obs Observation
	recs, err := kmsg.Read(o.KernelLog)
	obs.LogErr = err
	obs.MCEs = mce.Parse(recs)
	for _, r := range recs {
		if mce.Evidence(r.Message) {
			obs.Log = append(obs.Log, r)
		}
	}
	obs.Counts, obs.CountsErr = mce.ReadCounts(o.Root)
	obs.EDAC, obs.EDACErr = edac.Read(o.Root)
	obs.Map, obs.MapErr = memmap.Read(o.Root)
	return obs
}

// CheckNode is Collect then Judge: the check as the runner runs it.
func CheckNode(ctx context.Context, o Options) ([]checks.Verdict, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return Judge(Collect(o), o), nil
}

func (o Options) defaults() Options {
	if o.Root == "" {
		o.Root = "/"
	}
	if o.KernelLog == "" {
		o.KernelLog = filepath.Join(o.Root, "dev/kmsg")
	}
	if o.MaxLines <= 0 {
		o.MaxLines = 20
	}
	return o
}

// part gathers what names one component.
type part struct {
	component string
	dimm      *memmap.DIMM
	label     string   // an EDAC label no slot matched
	mapping   []string // how machine-check addresses were placed
	mces      []mce.Record
	edac      []edac.DIMM
}

// Judge turns an observation into verdicts: one per part with errors,
// FAIL past the bars, and one PASS for the host when there are none.
func Judge(obs Observation, o Options) []checks.Verdict {
	o = o.defaults()
	parts := map[string]*part{}
	get := func(comp string) *part {
		p := parts[comp]
		if p == nil {
			p = &part{component: comp}
			parts[comp] = p
		}
		return p
	}
	var locators []string
	if obs.Map != nil {
		for _, d := range obs.Map.DIMMs {
			locators = append(locators, d.Locator)
		}
	}
	for _, r := range obs.MCEs {
		switch {
		case r.Memory() && r.HasAddr() && obs.Map != nil:
			ds, how := obs.Map.Lookup(r.Addr)
			if len(ds) == 1 && ds[0].Locator != "" {
				p := get("dimm/" + ds[0].Locator)
				p.dimm = &ds[0]
				p.mces = append(p.mces, r)
				p.mapping = appendOnce(p.mapping, how)
				continue
			}
			p := get("memory")
			p.mces = append(p.mces, r)
			msg := how
			if len(ds) > 1 {
				msg += ": one of " + dimmNames(ds)
			}
			p.mapping = appendOnce(p.mapping, msg)
		case r.Memory():
			p := get("memory")
			p.mces = append(p.mces, r)
			if !r.HasAddr() {
				p.mapping = appendOnce(p.mapping, "the machine check carries no address")
			} else {
				p.mapping = appendOnce(p.mapping, "no SMBIOS memory map to place the address")
			}
		default:
			get(fmt.Sprintf("cpu/%d", r.Socket)).mces = append(get(fmt.Sprintf("cpu/%d", r.Socket)).mces, r)
		}
	}
	for _, d := range obs.EDAC.DIMMs {
		if d.CE == 0 && d.UE == 0 {
			continue
		}
		if loc := edac.MatchLocator(d.Label, locators); loc != "" {
			p := get("dimm/" + loc)
			p.edac = append(p.edac, d)
			if p.dimm == nil {
				for i := range obs.Map.DIMMs {
					if obs.Map.DIMMs[i].Locator == loc {
						p.dimm = &obs.Map.DIMMs[i]
					}
				}
			}
			continue
		}
		name := d.Label
		if name == "" {
			name = fmt.Sprintf("mc%d/%s", d.MC, d.Name)
		}
		p := get("dimm/" + name)
		p.label = name
		p.edac = append(p.edac, d)
	}
	if obs.EDAC.CENoInfo > 0 || obs.EDAC.UENoInfo > 0 {
		get("memory").edac = append(get("memory").edac, edac.DIMM{Name: "noinfo", Label: "not placed on a DIMM by EDAC",
			CE: obs.EDAC.CENoInfo, UE: obs.EDAC.UENoInfo})
	}

	if len(parts) == 0 {
		return []checks.Verdict{allClear(obs)}
	}
	comps := make([]string, 0, len(parts))
	for c := range parts {
		comps = append(comps, c)
	}
	sort.Strings(comps)
	out := make([]checks.Verdict, 0, len(comps))
	for _, c := range comps {
		out = append(out, judgePart(parts[c], obs, o))
	}
	return out
}

func judgePart(p *part, obs Observation, o Options) checks.Verdict {
	var ce, ue uint64
	for _, r := range p.mces {
		if r.Uncorrected() {
			ue++
		} else {
			ce++
		}
	}
	for _, d := range p.edac {
		ce += d.CE
		ue += d.UE
	}
	v := checks.Judge(p.component,
		checks.Value("correctedErrors", float64(ce), checks.AtMost(float64(o.MaxCorrected))),
		checks.Value("uncorrectedErrors", float64(ue), checks.AtMost(0)))
	v.Check = Check

	var what []string
	switch {
	case p.dimm != nil:
		what = append(what, describeDIMM(*p.dimm))
	case p.label != "":
		what = append(what, fmt.Sprintf("EDAC DIMM %q (no SMBIOS slot matches its label)", p.label))
	}
	if n := len(p.mces); n > 0 {
		what = append(what, fmt.Sprintf("%d machine check(s): %s", n, summarize(p.mces)))
	}
	for _, d := range p.edac {
		what = append(what, fmt.Sprintf("EDAC mc%d %s %q: %d corrected, %d uncorrected", d.MC, d.Name, d.Label, d.CE, d.UE))
	}
	what = append(what, p.mapping...)
	msg := strings.Join(what, "; ")
	if v.Message != "" {
		msg = v.Message + ": " + msg
	}
	if p.dimm != nil {
		msg = curev1.AppendEvidence(msg, curev1.EvidenceIdentity, identity(*p.dimm))
	}
	lines, total := evidenceLines(p, obs, o.MaxLines)
	if len(lines) > 0 {
		msg = curev1.AppendEvidence(msg, fmt.Sprintf("%s (last %d of %d hardware-error lines)", curev1.EvidenceKernelLog, len(lines), total), lines)
	}
	v.Message = msg
	return v
}

// evidenceLines are the kernel's lines of the part's machine checks and
// the EDAC lines naming its label, newest last.
func evidenceLines(p *part, obs Observation, max int) ([]string, int) {
	var want []string
	for _, r := range p.mces {
		want = append(want, r.Lines...)
	}
	var labels []string
	for _, d := range p.edac {
		if d.Label != "" && d.Name != "noinfo" {
			labels = append(labels, d.Label)
		}
	}
	for _, r := range obs.Log {
		if strings.HasPrefix(r.Message, "EDAC ") && slices.ContainsFunc(labels, func(l string) bool { return strings.Contains(r.Message, l) }) {
			want = append(want, r.Line())
		}
	}
	total := len(want)
	if len(want) > max {
		want = want[len(want)-max:]
	}
	return want, total
}

func describeDIMM(d memmap.DIMM) string {
	s := "DIMM " + d.Locator
	var ids []string
	if d.Serial != "" {
		ids = append(ids, "serial "+d.Serial)
	}
	if d.PartNumber != "" {
		ids = append(ids, "part "+d.PartNumber)
	}
	if d.Bank != "" {
		ids = append(ids, "bank "+d.Bank)
	}
	if len(ids) > 0 {
		s += " (" + strings.Join(ids, ", ") + ")"
	}
	return s
}

func identity(d memmap.DIMM) []string {
	var out []string
	for _, kv := range [][2]string{{"slot", d.Locator}, {"serial", d.Serial}, {"part", d.PartNumber}, {"bank", d.Bank}} {
		if kv[1] != "" {
			out = append(out, kv[0]+": "+kv[1])
		}
	}
	return out
}

func dimmNames(ds []memmap.DIMM) string {
	var names []string
	for _, d := range ds {
		names = append(names, describeDIMM(d))
	}
	return strings.Join(names, ", ")
}

// summarize describes up to three records and counts the rest.
func summarize(rs []mce.Record) string {
	var s []string
	for i, r := range rs {
		if i == 3 {
			s = append(s, fmt.Sprintf("and %d more", len(rs)-3))
			break
		}
		s = append(s, r.String())
	}
	return strings.Join(s, "; ")
}

func appendOnce(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// allClear is the one verdict of a clean boot, saying what was looked at.
func allClear(obs Observation) checks.Verdict {
	v := checks.Verdict{Component: "host", Check: Check, Status: checks.Pass,
		Observed: "correctedErrors=0 uncorrectedErrors=0", Expected: "correctedErrors<=0 uncorrectedErrors<=0"}
	var seen []string
	switch {
	case errors.Is(obs.LogErr, fs.ErrNotExist):
		// No /dev/kmsg: not a Linux node's root (a fixture).
		v.Status, v.Observed, v.Expected = checks.Skip, "", ""
		seen = append(seen, "no kernel log: "+obs.LogErr.Error())
	case obs.LogErr != nil:
		v.Status = checks.Error
		seen = append(seen, "kernel log unreadable: "+obs.LogErr.Error())
	default:
		seen = append(seen, "no machine checks in this boot's kernel log")
	}
	if obs.CountsErr == nil {
		seen = append(seen, fmt.Sprintf("%d bank polls, %d #MC exceptions", obs.Counts.Polls, obs.Counts.Exceptions))
	}
	switch {
	case errors.Is(obs.EDACErr, edac.ErrNoEDAC):
		seen = append(seen, "no EDAC driver for this memory controller")
	case obs.EDACErr != nil:
		seen = append(seen, "EDAC counters unreadable: "+obs.EDACErr.Error())
	default:
		seen = append(seen, fmt.Sprintf("EDAC: %d DIMMs, no errors", len(obs.EDAC.DIMMs)))
	}
	v.Message = strings.Join(seen, "; ")
	return v
}
