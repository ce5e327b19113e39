package manifests

import (
	"fmt"

	"github.com/cure-oss/cure/manifests/version"
)

// Satisfied reports whether firmware running at version running meets f's
// gate — the one comparison both the coordinator (Redfish phases) and the
// runner (in-band phases) plan with, so they cannot disagree.
//
// GateEqual uses version.Equal (an unparseable inventory string matches only
// the identical string). GateAtLeast needs both versions to parse and to be of
// the same family: "P2.1.4" is not "at least" "BF-24.10-17", it is a
// different product, and that is an error rather than a guess.
func (f Firmware) Satisfied(running string) (bool, error) {
	switch f.Gate {
	case GateEqual, "":
		return version.Equal(running, f.Version), nil
	case GateAtLeast:
		want, err := version.Parse(f.Version)
		if err != nil {
			return false, fmt.Errorf("firmware %s: desired version: %w", f.Name, err)
		}
		have, err := version.Parse(running)
		if err != nil {
			return false, fmt.Errorf("firmware %s: running version: %w", f.Name, err)
		}
		if have.Prefix() != want.Prefix() {
			return false, fmt.Errorf("firmware %s: running %q and desired %q are different version families (prefix %q vs %q); cannot order them",
				f.Name, running, f.Version, have.Prefix(), want.Prefix())
		}
		return version.Compare(have, want) >= 0, nil
	}
	return false, fmt.Errorf("firmware %s: unknown gate %q (want %s or %s)", f.Name, f.Gate, GateEqual, GateAtLeast)
}
