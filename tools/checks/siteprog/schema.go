package siteprog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cure-oss/cure/tools/checks"
)

// What one line of a program's output may hold (docs/VALIDATION.md,
// "Writing a site check"). Strings are bytes of UTF-8.
const (
	MaxLine         = 16 << 10 // one JSON line
	MaxComponent    = 128
	MaxText         = 256 // observed, expected
	MaxDetail       = 2048
	MaxMeasurements = 32 // per verdict
	MaxMetric       = 64
	MaxUnit         = 16
	MaxParameters   = 64 // names a program's metadata may declare
	MaxName         = 64
	MaxDescription  = 1024
)

// Statuses a program may report: MARGINAL is the coordinator's (fleet
// bands), never a program's.
var statuses = []checks.Status{checks.Pass, checks.Fail, checks.Skip, checks.Error}

// verdictFields and measurementFields are the whole schema: anything
// else on a line (a run id, a node, a check name) refuses the output.
var (
	verdictFields     = []string{"component", "status", "observed", "expected", "detail", "measurements"}
	measurementFields = []string{"metric", "value", "unit"}
	metadataFields    = []string{"name", "description", "timeout", "parameters"}
)

var (
	metricRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.]*$`)
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)
	// ParamRE is what a site check's parameter may be called: it becomes
	// the environment variable CURE_PARAM_<name>.
	ParamRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
)

// Metadata is what a program may say about itself, MAAS-style, on its
// first line: {"metadata": {...}}.
type Metadata struct {
	Name        string
	Description string
	Timeout     time.Duration
	// Parameters are the names of the params the program reads; a suite
	// param not among them is refused (a misspelt one must not pass).
	Parameters []string
}

// Line is one parsed output line: a verdict or the metadata.
type Line struct {
	Verdict  *checks.Verdict
	Metadata *Metadata
}

// ParseLine validates one line of a program's stdout against the schema:
// exact field names, each at most once, known statuses, bounded printable
// strings, finite numbers. It never echoes more than a few bytes of what it
// refuses.
func ParseLine(b []byte) (Line, error) {
	if len(b) > MaxLine {
		return Line{}, fmt.Errorf("%d bytes, longer than %d", len(b), MaxLine)
	}
	if !utf8.Valid(b) {
		return Line{}, errors.New("not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v checks.Verdict
	var md *Metadata
	var keys []string
	err := object(dec, "a JSON object", func(key string) error {
		keys = append(keys, key)
		switch key {
		case "component":
			return str(dec, key, &v.Component)
		case "status":
			var s string
			if err := str(dec, key, &s); err != nil {
				return err
			}
			v.Status = checks.Status(s)
			return nil
		case "observed":
			return str(dec, key, &v.Observed)
		case "expected":
			return str(dec, key, &v.Expected)
		case "detail":
			return str(dec, key, &v.Message)
		case "measurements":
			return measurements(dec, &v.Measurements)
		case "metadata":
			md = &Metadata{}
			return metadata(dec, md)
		}
		return fmt.Errorf("unknown field %s (a verdict line has only %s; the coordinator attributes every verdict to this run and node)",
			quote(key), strings.Join(verdictFields, ", "))
	})
	if err != nil {
		return Line{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return Line{}, errors.New("more than one JSON value on the line")
	}
	if md != nil {
		if len(keys) != 1 {
			return Line{}, errors.New("a metadata line holds only the metadata object, no verdict fields")
		}
		return Line{Metadata: md}, nil
	}
	if err := checkVerdict(&v); err != nil {
		return Line{}, err
	}
	return Line{Verdict: &v}, nil
}

func checkVerdict(v *checks.Verdict) error {
	switch {
	case v.Component == "":
		return errors.New("component is missing or empty")
	case strings.TrimSpace(v.Component) != v.Component:
		return errors.New("component has leading or trailing spaces")
	case v.Status == "":
		return errors.New("status is missing")
	case v.Status == "MARGINAL":
		return errors.New("status MARGINAL is the coordinator's (fleet bands), not a program's: report PASS, FAIL, SKIP or ERROR")
	}
	known := false
	for _, s := range statuses {
		known = known || v.Status == s
	}
	if !known {
		return fmt.Errorf("status %s is not one of PASS, FAIL, SKIP, ERROR", quote(string(v.Status)))
	}
	for _, f := range []struct {
		name, s string
		max     int
	}{{"component", v.Component, MaxComponent}, {"observed", v.Observed, MaxText}, {"expected", v.Expected, MaxText}, {"detail", v.Message, MaxDetail}} {
		if err := text(f.name, f.s, f.max); err != nil {
			return err
		}
	}
	return nil
}

// text bounds a string and refuses control characters: what a program
// prints ends up in reports and terminals.
func text(field, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%s is %d bytes, longer than %d", field, len(s), max)
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return fmt.Errorf("%s holds a control character (%U)", field, r)
		}
	}
	return nil
}

func measurements(dec *json.Decoder, out *[]checks.Measurement) error {
	if err := delim(dec, '[', "measurements", "a list"); err != nil {
		return err
	}
	for dec.More() {
		if len(*out) == MaxMeasurements {
			return fmt.Errorf("measurements: more than %d", MaxMeasurements)
		}
		i := len(*out)
		var m checks.Measurement
		var seenValue bool
		err := object(dec, "an object", func(key string) error {
			switch key {
			case "metric":
				return str(dec, key, &m.Metric)
			case "unit":
				return str(dec, key, &m.Unit)
			case "value":
				seenValue = true
				return number(dec, &m.Value)
			}
			return fmt.Errorf("unknown field %s (a measurement has only %s)", quote(key), strings.Join(measurementFields, ", "))
		})
		if err != nil {
			return fmt.Errorf("measurements[%d]: %w", i, err)
		}
		switch {
		case len(m.Metric) > MaxMetric || !metricRE.MatchString(m.Metric):
			return fmt.Errorf("measurements[%d]: metric %s is not a name (a letter, then letters, digits, '_' or '.'; at most %d bytes)", i, quote(m.Metric), MaxMetric)
		case !seenValue:
			return fmt.Errorf("measurements[%d]: value is missing", i)
		case m.Unit == "":
			return fmt.Errorf("measurements[%d]: unit is missing (MB/s, C, count, ...)", i)
		}
		if err := text(fmt.Sprintf("measurements[%d].unit", i), m.Unit, MaxUnit); err != nil {
			return err
		}
		*out = append(*out, m)
	}
	_, err := dec.Token() // ']'
	return err
}

func metadata(dec *json.Decoder, md *Metadata) error {
	return object(dec, "metadata: an object", func(key string) error {
		switch key {
		case "name":
			if err := str(dec, "metadata.name", &md.Name); err != nil {
				return err
			}
			if len(md.Name) > MaxName || !nameRE.MatchString(md.Name) {
				return fmt.Errorf("metadata.name %s is not a name (letters, digits, '.', '_', '-'; at most %d bytes)", quote(md.Name), MaxName)
			}
			return nil
		case "description":
			if err := str(dec, "metadata.description", &md.Description); err != nil {
				return err
			}
			return text("metadata.description", md.Description, MaxDescription)
		case "timeout":
			var s string
			if err := str(dec, "metadata.timeout", &s); err != nil {
				return err
			}
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return fmt.Errorf("metadata.timeout %s is not a positive Go duration (e.g. 90s)", quote(s))
			}
			md.Timeout = d
			return nil
		case "parameters":
			if err := delim(dec, '[', "metadata.parameters", "a list of names"); err != nil {
				return err
			}
			for dec.More() {
				var p string
				if err := str(dec, "metadata.parameters[]", &p); err != nil {
					return err
				}
				if !ParamRE.MatchString(p) {
					return fmt.Errorf("metadata.parameters: %s is not a parameter name (letters, digits, '_'; not starting with a digit)", quote(p))
				}
				for _, q := range md.Parameters {
					if q == p {
						return fmt.Errorf("metadata.parameters: %s twice", quote(p))
					}
				}
				if len(md.Parameters) == MaxParameters {
					return fmt.Errorf("metadata.parameters: more than %d", MaxParameters)
				}
				md.Parameters = append(md.Parameters, p)
			}
			_, err := dec.Token()
			return err
		}
		return fmt.Errorf("unknown field metadata.%s (metadata has only %s)", quote(key), strings.Join(metadataFields, ", "))
	})
}

// object reads one JSON object, calling fn for each key with the decoder
// at its value; a key twice is refused (encoding/json would keep the last).
func object(dec *json.Decoder, what string, fn func(key string) error) error {
	if err := delim(dec, '{', "", what); err != nil {
		return err
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return syntax(err)
		}
		key, _ := tok.(string)
		if seen[key] {
			return fmt.Errorf("field %s twice", quote(key))
		}
		seen[key] = true
		if err := fn(key); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	return syntax(err)
}

func delim(dec *json.Decoder, want json.Delim, field, what string) error {
	tok, err := dec.Token()
	if err != nil {
		return syntax(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		if field == "" {
			return fmt.Errorf("expected %s", what)
		}
		return fmt.Errorf("%s: expected %s", field, what)
	}
	return nil
}

func str(dec *json.Decoder, field string, out *string) error {
	tok, err := dec.Token()
	if err != nil {
		return syntax(err)
	}
	s, ok := tok.(string)
	if !ok {
		return fmt.Errorf("%s: expected a string", field)
	}
	*out = s
	return nil
}

func number(dec *json.Decoder, out *float64) error {
	tok, err := dec.Token()
	if err != nil {
		return syntax(err)
	}
	n, ok := tok.(json.Number)
	if !ok {
		return errors.New("value: expected a number")
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return fmt.Errorf("value %s is not a finite number", quote(string(n)))
	}
	*out = f
	return nil
}

func syntax(err error) error {
	if err == nil {
		return nil
	}
	if err == io.EOF {
		return errors.New("not a complete JSON object")
	}
	return fmt.Errorf("not JSON: %v", err)
}

// quote shows at most 40 bytes of what a program wrote.
func quote(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return strconv.QuoteToASCII(s)
}
