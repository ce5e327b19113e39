package store

import (
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cure-oss/cure/modes"
)

// The runs table's columns as Run holds them, listed once: SELECT, INSERT,
// UPDATE and UpdateRun's diff are all driven by this list.

// runColumn is one column and the Run field it holds.
type runColumn struct {
	name string
	// field is the column's codec bound to r's field: a scan destination,
	// and the value written.
	field func(r *Run) runField
	// use says who writes the column.
	use columnUse
}

type columnUse int

const (
	colData  columnUse = iota // written by CreateRun and UpdateRun
	colKey                    // written once by CreateRun (id, node)
	colLease                  // written only by the lease functions
)

// runField is a Run field as a column: sql.Scanner to read it, and
// driver.Valuer for the value written (comparable: UpdateRun diffs them).
type runField interface {
	sql.Scanner
	driver.Valuer
}

var runColumns = []runColumn{
	{"id", func(r *Run) runField { return textField[string]{&r.ID} }, colKey},
	{"node_id", func(r *Run) runField { return textField[string]{&r.NodeID} }, colKey},
	{"mode", func(r *Run) runField { return textField[modes.Mode]{&r.Mode} }, colData},
	{"manifest", func(r *Run) runField { return textField[string]{&r.Manifest} }, colData},
	{"status", func(r *Run) runField { return runStatusCol(&r.Status) }, colData},
	{"phase", func(r *Run) runField { return textField[modes.PhaseName]{&r.Phase} }, colData},
	{"resume_count", func(r *Run) runField { return intField{&r.ResumeCount} }, colData},
	{"phase_failures", func(r *Run) runField { return intField{&r.PhaseFailures} }, colData},
	{"disconnects", func(r *Run) runField { return intField{&r.Disconnects} }, colData},
	{"reboots", func(r *Run) runField { return intField{&r.Reboots} }, colData},
	{"completed_phases", func(r *Run) runField { return phasesField{&r.CompletedPhases} }, colData},
	{"started_at", func(r *Run) runField { return msField{&r.StartedAt} }, colData},
	{"ended_at", func(r *Run) runField { return msField{&r.EndedAt} }, colData},
	{"message", func(r *Run) runField { return textField[string]{&r.Message} }, colData},
	{"pipeline", func(r *Run) runField { return pipelineField{&r.Pipeline} }, colData},
	{"owner", func(r *Run) runField { return textField[string]{&r.Owner} }, colLease},
	{"lease_until", func(r *Run) runField { return msField{&r.LeaseUntil} }, colLease},
}

// runCols is the SELECT list of every column, in runColumns' order.
var runCols = func() string {
	names := make([]string, len(runColumns))
	for i, c := range runColumns {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}()

// runValues are the values a run's columns would be written as, in
// runColumns' order (nil for a lease column).
type runValues []driver.Value

func valuesOf(r Run) (runValues, error) {
	out := make(runValues, len(runColumns))
	for i, c := range runColumns {
		if c.use == colLease {
			continue
		}
		v, err := c.field(&r).Value()
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.name, err)
		}
		out[i] = v
	}
	return out, nil
}

// changed lists the data columns whose value differs from prev's (every
// data column when prev is nil) and their new values.
func (v runValues) changed(prev runValues) (set []string, args []any) {
	for i, c := range runColumns {
		if c.use != colData || (prev != nil && prev[i] == v[i]) {
			continue
		}
		set = append(set, c.name+" = ?")
		args = append(args, v[i])
	}
	return set, args
}

func scanRun(sc scanner) (Run, error) {
	var r Run
	dest := make([]any, len(runColumns))
	for i, c := range runColumns {
		dest[i] = c.field(&r)
	}
	if err := sc.Scan(dest...); err != nil {
		if err == sql.ErrNoRows {
			return Run{}, ErrNotFound
		}
		if r.ID != "" {
			return Run{}, fmt.Errorf("run %s: %w", r.ID, err)
		}
		return Run{}, err
	}
	return r, nil
}

// textField is a text column held as a string or a string type (a mode,
// a phase name): written as a plain string either way.
type textField[T ~string] struct{ p *T }

func (f textField[T]) Scan(src any) error {
	var s sql.NullString
	if err := s.Scan(src); err != nil {
		return err
	}
	*f.p = T(s.String)
	return nil
}
func (f textField[T]) Value() (driver.Value, error) { return string(*f.p), nil }

type intField struct{ p *int }

func (f intField) Scan(src any) error {
	var n sql.NullInt64
	if err := n.Scan(src); err != nil {
		return err
	}
	*f.p = int(n.Int64)
	return nil
}
func (f intField) Value() (driver.Value, error) { return int64(*f.p), nil }

// msField is a time as UTC unix milliseconds (0: unset).
type msField struct{ p *time.Time }

func (f msField) Scan(src any) error {
	var n sql.NullInt64
	if err := n.Scan(src); err != nil {
		return err
	}
	*f.p = fromMs(n.Int64)
	return nil
}
func (f msField) Value() (driver.Value, error) { return toMs(*f.p), nil }

// phasesField is a list of phase names as a JSON array (nil: "[]").
type phasesField struct{ p *[]modes.PhaseName }

func (f phasesField) Scan(src any) error {
	var s sql.NullString
	if err := s.Scan(src); err != nil {
		return err
	}
	var l []modes.PhaseName
	if s.String != "" {
		if err := json.Unmarshal([]byte(s.String), &l); err != nil {
			return fmt.Errorf("completed_phases column: %w", err)
		}
	}
	if len(l) == 0 {
		l = nil
	}
	*f.p = l
	return nil
}

func (f phasesField) Value() (driver.Value, error) {
	l := *f.p
	if l == nil {
		l = []modes.PhaseName{}
	}
	b, err := json.Marshal(l)
	return string(b), err
}

type pipelineField struct{ p *PipelineState }

func (f pipelineField) Scan(src any) error {
	var s sql.NullString
	if err := s.Scan(src); err != nil {
		return err
	}
	p, err := unmarshalPipeline(s.String)
	if err != nil {
		return fmt.Errorf("pipeline column: %w", err)
	}
	*f.p = p
	return nil
}
func (f pipelineField) Value() (driver.Value, error) { return marshalPipeline(*f.p) }
