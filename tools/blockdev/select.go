package blockdev

import (
	"fmt"
	"path"
	"strconv"
	"strings"
)

// Selector names an install target. Empty fields match anything; Model is
// a path.Match glob; Transport "" or "any" matches every transport; Name
// matches "nvme0n1" or "/dev/nvme0n1"; sizes are bytes, 0 meaning no bound.
type Selector struct {
	Transport string
	Model     string
	Serial    string
	Name      string
	MinSize   uint64
	MaxSize   uint64
}

// IsEmpty reports whether the selector constrains nothing at all.
func (s Selector) IsEmpty() bool {
	return s == Selector{}
}

// String renders the set fields: {transport=nvme model="QEMU*" min=1.0 GiB}.
func (s Selector) String() string {
	var parts []string
	if s.Transport != "" {
		parts = append(parts, "transport="+s.Transport)
	}
	if s.Model != "" {
		parts = append(parts, "model="+strconv.Quote(s.Model))
	}
	if s.Serial != "" {
		parts = append(parts, "serial="+strconv.Quote(s.Serial))
	}
	if s.Name != "" {
		parts = append(parts, "name="+s.Name)
	}
	if s.MinSize != 0 {
		parts = append(parts, "min="+HumanSize(s.MinSize))
	}
	if s.MaxSize != 0 {
		parts = append(parts, "max="+HumanSize(s.MaxSize))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// Matches reports whether d satisfies every set field; it does not look at
// BootMedium or ReadOnly (Select does).
func (s Selector) Matches(d Disk) (bool, error) {
	if s.Transport != "" && !strings.EqualFold(s.Transport, "any") && !strings.EqualFold(s.Transport, d.Transport) {
		return false, nil
	}
	if s.Model != "" {
		ok, err := path.Match(s.Model, d.Model)
		if err != nil {
			return false, fmt.Errorf("selector model glob %q: %w", s.Model, err)
		}
		if !ok {
			return false, nil
		}
	}
	if s.Serial != "" && s.Serial != d.Serial {
		return false, nil
	}
	if s.Name != "" && strings.TrimPrefix(s.Name, "/dev/") != d.Name {
		return false, nil
	}
	if s.MinSize != 0 && d.SizeBytes < s.MinSize {
		return false, nil
	}
	if s.MaxSize != 0 && d.SizeBytes > s.MaxSize {
		return false, nil
	}
	return true, nil
}

// Select returns the single disk s matches. It never returns a boot medium
// or read-only disk, and fails when the selector is empty, matches
// nothing, or matches more than one disk: a destructive caller must never
// have to guess.
func Select(disks []Disk, s Selector) (Disk, error) {
	if s.IsEmpty() {
		return Disk{}, fmt.Errorf("disk selector is empty: set at least one of transport, model, serial, name, min/max size")
	}
	if s.MinSize != 0 && s.MaxSize != 0 && s.MinSize > s.MaxSize {
		return Disk{}, fmt.Errorf("disk selector %s: min size is larger than max size", s)
	}
	var matched, excluded []string
	var eligible []Disk
	var hits []Disk
	for _, d := range disks {
		ok, err := s.Matches(d)
		if err != nil {
			return Disk{}, err
		}
		unsafe := ""
		switch {
		case d.BootMedium:
			unsafe = "boot medium"
		case d.ReadOnly:
			unsafe = "read-only"
		}
		if unsafe != "" {
			if ok {
				excluded = append(excluded, d.Name+" ("+unsafe+")")
			}
			continue
		}
		eligible = append(eligible, d)
		if ok {
			hits = append(hits, d)
			matched = append(matched, d.Name)
		}
	}
	switch len(hits) {
	case 1:
		return hits[0], nil
	case 0:
		msg := fmt.Sprintf("no disk matches selector %s", s)
		if len(excluded) > 0 {
			msg += "; excluded: " + strings.Join(excluded, ", ")
		}
		var cands []string
		for _, d := range eligible {
			cands = append(cands, describe(d))
		}
		if len(cands) == 0 {
			cands = []string{"none"}
		}
		return Disk{}, fmt.Errorf("%s; candidates: %s", msg, strings.Join(cands, ", "))
	default:
		return Disk{}, fmt.Errorf("disk selector %s is ambiguous: matches %s", s, strings.Join(matched, ", "))
	}
}

func describe(d Disk) string {
	model := d.Model
	if model == "" {
		model = d.Transport
	}
	return fmt.Sprintf("%s (%s, %s)", d.Name, model, HumanSize(d.SizeBytes))
}

// HumanSize renders bytes in binary units with one decimal: "1.0 GiB".
func HumanSize(b uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v := float64(b)
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", b)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
