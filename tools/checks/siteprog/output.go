package siteprog

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/cure-oss/cure/tools/checks"
)

// Output is a program's stdout, validated.
type Output struct {
	Verdicts []checks.Verdict
	Metadata *Metadata
}

// ParseOutput validates a program's whole stdout: one JSON object a line
// (blank lines skipped), the metadata only on the first, at most
// maxVerdicts verdicts, each component once. One refused line refuses the
// whole output: a program that prints something else than the schema is
// broken, and none of what it said is taken.
func ParseOutput(out []byte, maxVerdicts int) (Output, error) {
	var o Output
	seen := map[string]int{}
	first := true
	for n, line := range bytes.Split(out, []byte("\n")) {
		lineNo := n + 1
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		l, err := ParseLine(line)
		if err != nil {
			return Output{}, fmt.Errorf("line %d: %w", lineNo, err)
		}
		if l.Metadata != nil {
			if !first {
				return Output{}, fmt.Errorf("line %d: metadata only on the first line", lineNo)
			}
			o.Metadata = l.Metadata
			first = false
			continue
		}
		first = false
		v := *l.Verdict
		if prev, dup := seen[v.Component]; dup {
			return Output{}, fmt.Errorf("line %d: component %s already reported on line %d", lineNo, quote(v.Component), prev)
		}
		if len(o.Verdicts) == maxVerdicts {
			return Output{}, fmt.Errorf("line %d: more than %d verdicts", lineNo, maxVerdicts)
		}
		seen[v.Component] = lineNo
		o.Verdicts = append(o.Verdicts, v)
	}
	return o, nil
}

// CheckParams refuses suite params the program's metadata does not
// declare (when it declares any metadata at all).
func CheckParams(md *Metadata, params map[string]any) error {
	if md == nil {
		return nil
	}
	var unknown []string
	for k := range params {
		if !slices.Contains(md.Parameters, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	declared := "none"
	if len(md.Parameters) > 0 {
		declared = strings.Join(md.Parameters, ", ")
	}
	return fmt.Errorf("params %s: the program's metadata does not declare them (it reads %s)", strings.Join(unknown, ", "), declared)
}
