package wipe

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cure-oss/cure/tools/blockdev"
)

// SelectTargets returns every disk sel matches, sorted by name. Unlike an
// install target a wipe may cover several disks, so "ambiguous" here means
// anything that leaves doubt about what would be erased; each refuses the
// whole run rather than quietly narrowing it:
//   - an empty selector, or one that matches nothing;
//   - a match that is the boot medium or read-only (the operator's
//     selector is broader than they think);
//   - a match with dm/md devices stacked on it (in use);
//   - a match without a serial, or two matches sharing one (the PSID and
//     the verdict are keyed by serial).
func SelectTargets(disks []blockdev.Disk, sel blockdev.Selector) ([]blockdev.Disk, error) {
	if sel.IsEmpty() {
		return nil, fmt.Errorf("wipe refused: disk selector is empty; name the disks to erase (transport, model, serial, name or size)")
	}
	var out []blockdev.Disk
	var problems []string
	serials := map[string][]string{}
	for _, d := range disks {
		ok, err := sel.Matches(d)
		if err != nil {
			return nil, fmt.Errorf("wipe refused: %w", err)
		}
		if !ok {
			continue
		}
		switch {
		case d.BootMedium:
			problems = append(problems, d.Name+" is the boot medium")
		case d.ReadOnly:
			problems = append(problems, d.Name+" is read-only")
		case len(d.Holders) > 0:
			problems = append(problems, fmt.Sprintf("%s is in use by %s", d.Name, strings.Join(d.Holders, ", ")))
		case d.Serial == "":
			problems = append(problems, d.Name+" reports no serial")
		}
		if d.Serial != "" {
			serials[d.Serial] = append(serials[d.Serial], d.Name)
		}
		out = append(out, d)
	}
	for s, names := range serials {
		if len(names) > 1 {
			problems = append(problems, fmt.Sprintf("%s share serial %q", strings.Join(names, " and "), s))
		}
	}
	if len(out) == 0 {
		var all []string
		for _, d := range disks {
			all = append(all, d.Name)
		}
		return nil, fmt.Errorf("wipe refused: disk selector %s matches no disk (disks: %s)", sel, strings.Join(all, ", "))
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, fmt.Errorf("wipe refused: disk selector %s is ambiguous: %s; narrow the selector", sel, strings.Join(problems, "; "))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Names lists the disk names, for Target.Batch.
func Names(ds []blockdev.Disk) []string {
	var n []string
	for _, d := range ds {
		n = append(n, d.Name)
	}
	return n
}
