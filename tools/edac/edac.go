// Package edac reads the kernel's EDAC error counters: per DIMM (or rank)
// under root/sys/devices/system/edac/mc/mc*/dimm*|rank* (dimm_label,
// dimm_location, dimm_ce_count, dimm_ue_count), which every EDAC driver
// has filled since the EDAC core's 3.0 API (the legacy csrow* files
// repeat the same counts). A counter counts since the EDAC driver loaded:
// in CURE, since boot.
package edac

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// DIMM is one memory module's (or rank's) counters as EDAC sees it.
type DIMM struct {
	MC       int    // memory controller number
	Name     string // "dimm3", "rank0": where sysfs has it
	Label    string // dimm_label: the board's name when the driver or a label file set it
	Location string // dimm_location: "channel 1 slot 0"
	CE, UE   uint64
}

// Summary is every controller's counters.
type Summary struct {
	DIMMs []DIMM
	// NoInfo counts errors EDAC could not place on a DIMM.
	CENoInfo, UENoInfo uint64
}

// ErrNoEDAC means no EDAC driver registered a memory controller: a board
// EDAC does not support (or a virtual machine). Not a failure.
var ErrNoEDAC = errors.New("no EDAC memory controller (no driver for this memory controller)")

var (
	mcRE   = regexp.MustCompile(`^mc(\d+)$`)
	dimmRE = regexp.MustCompile(`^(dimm|rank)\d+$`)
)

// Read reads every controller under root.
func Read(root string) (Summary, error) {
	base := filepath.Join(root, "sys/devices/system/edac/mc")
	ents, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return Summary{}, ErrNoEDAC
	}
	if err != nil {
		return Summary{}, fmt.Errorf("edac: %w", err)
	}
	var s Summary
	var errs []error
	found := false
	for _, e := range ents {
		m := mcRE.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		found = true
		mc, _ := strconv.Atoi(m[1])
		dir := filepath.Join(base, e.Name())
		if n, err := readCount(dir, "ce_noinfo_count"); err == nil {
			s.CENoInfo += n
		}
		if n, err := readCount(dir, "ue_noinfo_count"); err == nil {
			s.UENoInfo += n
		}
		subs, err := os.ReadDir(dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("edac mc%d: %w", mc, err))
			continue
		}
		var dimms []string
		for _, d := range subs {
			if dimmRE.MatchString(d.Name()) {
				dimms = append(dimms, d.Name())
			}
		}
		sort.Slice(dimms, func(i, j int) bool { return natLess(dimms[i], dimms[j]) })
		for _, name := range dimms {
			d, err := readDIMM(filepath.Join(dir, name))
			if err != nil {
				errs = append(errs, fmt.Errorf("edac mc%d %s: %w", mc, name, err))
				continue
			}
			d.MC, d.Name = mc, name
			s.DIMMs = append(s.DIMMs, d)
		}
	}
	if !found {
		return Summary{}, ErrNoEDAC
	}
	return s, errors.Join(errs...)
}

func readDIMM(dir string) (DIMM, error) {
	var d DIMM
	var err error
	if d.CE, err = readCount(dir, "dimm_ce_count"); err != nil {
		return d, err
	}
	if d.UE, err = readCount(dir, "dimm_ue_count"); err != nil {
		return d, err
	}
	d.Label = readText(dir, "dimm_label")
	d.Location = readText(dir, "dimm_location")
	return d, nil
}

func readCount(dir, name string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a count", filepath.Join(dir, name), strings.TrimSpace(string(b)))
	}
	return n, nil
}

// readText reads a label: bounded, valid UTF-8, "" when absent.
func readText(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	if len(b) > 128 {
		b = b[:128]
	}
	return strings.ToValidUTF8(strings.TrimSpace(string(b)), "\uFFFD")
}

// natLess orders "dimm2" before "dimm10".
func natLess(a, b string) bool {
	ta, na := splitNum(a)
	tb, nb := splitNum(b)
	if ta != tb {
		return ta < tb
	}
	return na < nb
}

func splitNum(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n, _ := strconv.Atoi(s[i:])
	return s[:i], n
}

// MatchLocator finds the SMBIOS Device Locator an EDAC label names: the
// label itself ("DIMM_A1"), or the locator after the bank locator, as
// ghes_edac and label files write it ("NODE 0 DIMM_A1", "P0 CHANNEL A
// DIMM 0"). The longest locator that fits wins; "" when none does.
func MatchLocator(label string, locators []string) string {
	best := ""
	for _, loc := range locators {
		if loc == "" || len(loc) <= len(best) {
			continue
		}
		if label == loc || strings.HasSuffix(label, " "+loc) || strings.HasSuffix(label, "_"+loc) {
			best = loc
		}
	}
	return best
}
