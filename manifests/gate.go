package manifests

import (
	"fmt"

	"github.com/cure-oss/cure/manifests/version"
)

// Satisfied reports whether firmware running at version running meets f's
// gate. It is version.Satisfies, the one comparison both the coordinator
// (Redfish phases) and the runner (in-band phases) plan with, with the
// entry's name on the error: an unparseable version under at-least is an
// error naming the value, which both sides report as an ERROR verdict.
func (f Firmware) Satisfied(running string) (bool, error) {
	ok, err := version.Satisfies(f.Gate, running, f.Version)
	if err != nil {
		return false, fmt.Errorf("firmware %s: %w", f.Name, err)
	}
	return ok, nil
}
