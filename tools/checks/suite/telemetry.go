package suite

import (
	"fmt"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/telemetry/bars"
)

// telemetryErrors checks every stage's telemetry bars: an unknown metric
// or a bar out of its range is an error naming the stage and the key.
func telemetryErrors(s *manifests.ValidationSuite) []string {
	var errs []string
	for i, st := range s.Spec.Stages {
		if st.Telemetry == nil {
			continue
		}
		for _, e := range bars.Validate(st.Telemetry.Thresholds) {
			errs = append(errs, fmt.Sprintf("spec.stages[%d] (%s): telemetry.%s", i, st.Name, e))
		}
	}
	return errs
}
