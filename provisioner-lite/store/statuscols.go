package store

import (
	"database/sql"
	"database/sql/driver"
	"fmt"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

// Statuses are enums in Go and names in the database (runstate's: the ones
// earlier coordinators stored, so old rows read and the schema's CHECK
// constraints hold). enumCol is one such column as a scan destination and
// a written value.
type enumCol[E ~int32] struct {
	p     *E
	what  string
	name  func(E) string
	parse func(string) (E, error)
}

func (c enumCol[E]) Scan(src any) error {
	var s sql.NullString
	if err := s.Scan(src); err != nil {
		return err
	}
	v, err := c.parse(s.String)
	if err != nil {
		return fmt.Errorf("%s column: %w", c.what, err)
	}
	*c.p = v
	return nil
}

func (c enumCol[E]) Value() (driver.Value, error) {
	n := c.name(*c.p)
	if n == "" {
		return nil, fmt.Errorf("%s %d is not one a run can be stored with", c.what, int32(*c.p))
	}
	return n, nil
}

func runStatusCol(p *curev1.RunStatus) enumCol[curev1.RunStatus] {
	return enumCol[curev1.RunStatus]{p, "run status", runstate.RunName, runstate.ParseRun}
}

func phaseStatusCol(p *curev1.PhaseStatus) enumCol[curev1.PhaseStatus] {
	return enumCol[curev1.PhaseStatus]{p, "phase status", runstate.PhaseName, runstate.ParsePhase}
}

func verdictStatusCol(p *curev1.VerdictStatus) enumCol[curev1.VerdictStatus] {
	return enumCol[curev1.VerdictStatus]{p, "verdict status", runstate.VerdictName, runstate.ParseVerdict}
}
