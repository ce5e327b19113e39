package gpu

import (
	"strconv"
	"strings"
)

// SXid is one NVSwitch error the NVIDIA driver logged (nvidia-nvswitch):
//
//	nvidia-nvswitch3: SXid (PCI:0000:88:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)
//	nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 24007, Fatal, Link 44 sourcetrack TCEN0 crumbstore ECC DBE Error (First)
//
// A fatal SXid takes the switch's links down until the switch is reset;
// NVIDIA's NVSwitch documentation lists the codes. The driver follows an
// error with "Data {...}" lines of the same SXid, which are not errors of
// their own.
type SXid struct {
	Switch string // the NVSwitch's PCI address, normalised
	Code   int
	Fatal  bool
	Link   int // -1 when the message names no link
	Text   string
}

// ParseSXid reads one kernel log message; ok is false for anything that is
// not an SXid error line (its Data lines included).
func ParseSXid(msg string) (s SXid, ok bool) {
	_, rest, found := strings.Cut(msg, "SXid (PCI:")
	if !found {
		return s, false
	}
	addr, rest, found := strings.Cut(rest, "): ")
	if !found || addr == "" || strings.Trim(addr, "0123456789abcdefABCDEF:.") != "" {
		return s, false
	}
	num, rest, found := strings.Cut(rest, ", ")
	code, err := strconv.Atoi(num)
	if !found || err != nil || code < 0 {
		return s, false
	}
	s = SXid{Switch: NormalizeBusID(addr), Code: code, Link: -1}
	if s.Switch == "" {
		s.Switch = addr
	}
	switch {
	case strings.HasPrefix(rest, "Fatal"):
		s.Fatal, rest = true, rest[len("Fatal"):]
	case strings.HasPrefix(rest, "Non-fatal"):
		rest = rest[len("Non-fatal"):]
	default:
		return SXid{}, false // a Data line, or something else
	}
	if after, ok := strings.CutPrefix(rest, ", Link "); ok {
		n := len(after) - len(strings.TrimLeft(after, "0123456789"))
		if l, err := strconv.Atoi(after[:n]); err == nil {
			s.Link, rest = l, after[n:]
		}
	}
	s.Text = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(rest, ","), " "))
	return s, true
}

// SXidVerdict judges the SXids of the boot's kernel log (messages in log
// order): any fatal one fails, naming the switch, link and code; the
// non-fatal ones are reported.
func SXidVerdict(messages []string) Verdict {
	v := Verdict{Component: "gpu", Check: CheckSXid, Expected: "no fatal SXid"}
	var fatal, other []string
	seen := map[string]bool{}
	for _, m := range messages {
		s, ok := ParseSXid(m)
		if !ok {
			continue
		}
		d := "NVSwitch " + s.Switch + " SXid " + strconv.Itoa(s.Code)
		if s.Link >= 0 {
			d += " link " + strconv.Itoa(s.Link)
		}
		if s.Text != "" {
			d += " (" + s.Text + ")"
		}
		if seen[d] {
			continue
		}
		seen[d] = true
		if s.Fatal {
			fatal = append(fatal, d)
		} else {
			other = append(other, d)
		}
	}
	v.Observed = strconv.Itoa(len(fatal)) + " fatal, " + strconv.Itoa(len(other)) + " non-fatal"
	switch {
	case len(fatal) > 0:
		v.Status, v.Message = Fail, "fatal: "+strings.Join(fatal, "; ")
		if len(other) > 0 {
			v.Message += "; non-fatal: " + strings.Join(other, "; ")
		}
	case len(other) > 0:
		v.Status, v.Message = Pass, "non-fatal: "+strings.Join(other, "; ")
	default:
		v.Status, v.Observed = Pass, "none in the kernel log"
	}
	return v
}
