// Package bluefield installs a BlueField DPU bundle (.bfb) from the host
// through the rshim driver: it reads the DPU's state from
// /dev/rshimN/misc, streams the bundle into /dev/rshimN/boot, waits for
// the DPU to report that it is back, and resets the DPU's Arm side with
// "SW_RESET 1". Everything goes through the Rshim seam, so tests use a
// fake that models the misc file and the boot log.
package bluefield

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Misc is /dev/rshimN/misc: "KEY   value (legend)" lines, then, at
// DISPLAY_LEVEL 2, the boot log (" INFO[BL31]: start", ...).
type Misc struct {
	Fields   map[string]string // KEY -> value (first token)
	BootMode int               // BOOT_MODE: 0 rshim, 1 emmc, 2 emmc-boot-swap; -1 absent
	DevName  string            // DEV_NAME, e.g. "pcie-0000:a3:00.2" or "usb-3.3"
	DevInfo  string            // DEV_INFO, e.g. "BlueField-3(Rev 1)"
	Log      []string          // log lines, trimmed, in order
}

var (
	miscField = regexp.MustCompile(`^([A-Z][A-Z0-9_]+)\s+(\S.*)$`)
	logLine   = regexp.MustCompile(`^(INFO|WARN|ERR|ERROR|DEBUG)\[[A-Za-z0-9_]+\]:`)
)

// ParseMisc decodes the misc file. It fails when no field is found: the
// file read is not an rshim misc file.
func ParseMisc(b []byte) (*Misc, error) {
	m := &Misc{Fields: map[string]string{}, BootMode: -1}
	// The log part is the DPU's text: keep it UTF-8 for protobuf. Lines
	// are split without bufio.Scanner's 64 KiB limit.
	inLog := false
	for raw := range strings.Lines(strings.ToValidUTF8(string(b), "\uFFFD")) {
		line := strings.TrimSpace(raw)
		switch {
		case strings.HasPrefix(line, "---") || line == "Log Messages":
			inLog = true
		case line == "":
		case logLine.MatchString(line):
			m.Log = append(m.Log, line)
		case inLog:
			// The driver prints its fields before the log: a field-like
			// line in the DPU's log must not set BOOT_MODE or DEV_NAME.
		default:
			f := miscField.FindStringSubmatch(line)
			if f == nil {
				continue // a log line in a format we do not know; keep going
			}
			v := f[2]
			// "1 (0:rshim, 1:emmc, 2:emmc-boot-swap)": the value is the
			// first token; DEV_INFO "BlueField-3(Rev 1)" has no legend.
			if i := strings.Index(v, " ("); i >= 0 {
				v = v[:i]
			}
			// \S in the pattern is ASCII; TrimSpace also trims Unicode
			// spaces (U+00A0, U+0085), which can leave nothing.
			if v = strings.TrimSpace(v); v == "" {
				continue
			}
			m.Fields[f[1]] = v
		}
	}
	if len(m.Fields) == 0 {
		return nil, fmt.Errorf("rshim misc: no KEY value lines found in %d bytes", len(b))
	}
	if v, ok := m.Fields["BOOT_MODE"]; ok {
		n, err := strconv.Atoi(strings.Fields(v)[0])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("rshim misc: BOOT_MODE %q: expected a number (0 rshim, 1 emmc, 2 emmc-boot-swap)", v)
		}
		m.BootMode = n
	}
	m.DevName = m.Fields["DEV_NAME"]
	m.DevInfo = m.Fields["DEV_INFO"]
	return m, nil
}

// PCI is the DPU's NIC function derived from DEV_NAME "pcie-<bdf>" (the
// rshim function's device, function 0), or "" for USB rshim.
func (m *Misc) PCI() string {
	bdf, ok := strings.CutPrefix(m.DevName, "pcie-")
	if !ok || len(bdf) < 2 || bdf[len(bdf)-2] != '.' {
		return ""
	}
	return bdf[:len(bdf)-1] + "0"
}

// State is where the DPU is, read from its boot log.
type State int

const (
	StateUnknown    State = iota // no log lines (yet)
	StateBooting                 // BL2/BL31/UEFI progress
	StateInstalling              // the bundle's installer runs
	StateReady                   // "DPU is ready"
	StateFailed                  // an error line
)

func (s State) String() string {
	return [...]string{"unknown", "booting", "installing", "ready", "failed"}[s]
}

// LogState judges log lines: an error marker wins, then readiness, then
// installer progress. failure names the line that failed.
func LogState(lines []string) (s State, failure string) {
	s = StateUnknown
	for _, l := range lines {
		low := strings.ToLower(l)
		switch {
		case strings.HasPrefix(l, "ERR"), strings.Contains(low, " failed"), strings.Contains(low, "error"):
			return StateFailed, l
		case strings.Contains(low, "dpu is ready"):
			s = StateReady
		case strings.Contains(low, "installation") || strings.Contains(low, "installing") || strings.Contains(low, "updating"):
			if s != StateReady {
				s = StateInstalling
			}
		default:
			if s == StateUnknown {
				s = StateBooting
			}
		}
	}
	return s, ""
}

// Versions are the BlueField software versions as `bfver` prints them
// ("BlueField ATF version: ...", "BlueField UEFI version: ...",
// "BlueField BSP version: ...", "OS Release Version: ...").
type Versions struct {
	ATF, UEFI, BSP, OSRelease string
}

// ParseVersions finds the version lines anywhere in text (bfver output, a
// console capture, or a log that carries them); absent ones stay empty.
func ParseVersions(text []byte) Versions {
	var v Versions
	for _, l := range strings.Split(strings.ToValidUTF8(string(text), "\uFFFD"), "\n") {
		l = strings.TrimSpace(l)
		for prefix, dst := range map[string]*string{
			"BlueField ATF version:":  &v.ATF,
			"BlueField UEFI version:": &v.UEFI,
			"BlueField BSP version:":  &v.BSP,
			"OS Release Version:":     &v.OSRelease,
		} {
			if i := strings.Index(l, prefix); i >= 0 {
				*dst = strings.TrimSpace(l[i+len(prefix):])
			}
		}
	}
	return v
}
