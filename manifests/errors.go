package manifests

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// FieldError is one problem in a manifest, located by file, line and field
// path ("spec.firmware[3].version").
type FieldError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e FieldError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Field == "" {
		return loc + ": " + e.Msg
	}
	return loc + ": " + e.Field + ": " + e.Msg
}

// ValidationError is every problem found in one manifest.
type ValidationError struct {
	Errors []FieldError
}

// Error lists the problems one per line, in file order.
func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		lines[i] = fe.Error()
	}
	return strings.Join(lines, "\n")
}

func (e *ValidationError) sort() {
	slices.SortStableFunc(e.Errors, func(a, b FieldError) int {
		return cmp.Compare(a.Line, b.Line)
	})
}
