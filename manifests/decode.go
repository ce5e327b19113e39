package manifests

import (
	"fmt"
	"math"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// decoder walks a yaml.Node tree and collects every problem with its line, so
// one run of the loader reports all of them.
type decoder struct {
	file string
	errs []FieldError
}

func (d *decoder) errorf(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, FieldError{File: d.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func index(parent string, i int) string { return fmt.Sprintf("%s[%d]", parent, i) }

// resolve follows YAML aliases (*anchor) to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what a node holds, for "expected X, found Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return fmt.Sprintf("string %q", n.Value)
		case "!!int":
			return "integer " + n.Value
		case "!!float":
			return "number " + n.Value
		case "!!bool":
			return "boolean " + n.Value
		case "!!null":
			return "null"
		}
		return fmt.Sprintf("%s %q", n.ShortTag(), n.Value)
	}
	return "an unexpected node"
}

// fields is a mapping node whose keys have been checked against a schema.
type fields struct {
	d    *decoder
	node *yaml.Node
	path string
	ok   bool // the node was a mapping; when false, lookups return nothing quietly
	vals map[string]*yaml.Node
	keys map[string]*yaml.Node
}

// mapping checks that n is a mapping whose keys are all in known and unique.
func (d *decoder) mapping(n *yaml.Node, p string, known ...string) *fields {
	n = resolve(n)
	f := &fields{d: d, node: n, path: p, vals: map[string]*yaml.Node{}, keys: map[string]*yaml.Node{}}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, p, "expected a mapping, found %s", describe(n))
		return f
	}
	f.ok = true
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, p, "keys must be strings, found %s", describe(k))
			continue
		}
		if first, dup := f.keys[k.Value]; dup {
			d.errorf(k, join(p, k.Value), "duplicate key (first set on line %d)", first.Line)
			continue
		}
		if !slices.Contains(known, k.Value) {
			d.errorf(k, join(p, k.Value), "unknown field (known fields: %s)", strings.Join(known, ", "))
			continue
		}
		f.keys[k.Value] = k
		f.vals[k.Value] = resolve(v)
	}
	return f
}

// get returns the value node of key, or nil when it is absent or null.
func (f *fields) get(key string) *yaml.Node {
	v := f.vals[key]
	if isNull(v) {
		return nil
	}
	return v
}

func (f *fields) has(key string) bool { return f.get(key) != nil }

func (f *fields) missing(key string) {
	if f.ok {
		f.d.errorf(f.node, join(f.path, key), "required field is missing")
	}
}

// str reads a string field. Unquoted numbers are taken as written ("7.10"
// stays "7.10"); booleans, lists and mappings are errors.
func (f *fields) str(key string, required bool) (string, *yaml.Node) {
	v := f.get(key)
	if v == nil {
		if required {
			f.missing(key)
		}
		return "", nil
	}
	s, ok := f.d.scalarString(v, join(f.path, key))
	if !ok {
		return "", nil
	}
	if s == "" && required {
		f.d.errorf(v, join(f.path, key), "must not be empty")
	}
	return s, v
}

func (d *decoder) scalarString(v *yaml.Node, p string) (string, bool) {
	if v.Kind != yaml.ScalarNode {
		d.errorf(v, p, "expected a string, found %s", describe(v))
		return "", false
	}
	switch v.ShortTag() {
	case "!!str", "!!int", "!!float":
		return v.Value, true
	}
	d.errorf(v, p, "expected a string, found %s (quote it if it is meant as text)", describe(v))
	return "", false
}

// enum reads a string field restricted to allowed values; def is used when
// the field is absent (pass "" to make it required).
func (f *fields) enum(key, def string, allowed ...string) string {
	s, v := f.str(key, def == "")
	if v == nil || s == "" {
		return def // an explicit "" means the default too
	}
	if s != "" && !slices.Contains(allowed, s) {
		f.d.errorf(v, join(f.path, key), "%q is not one of %s", s, strings.Join(allowed, ", "))
		return ""
	}
	return s
}

// optEnum is enum for an optional field with no default.
func (f *fields) optEnum(key string, allowed ...string) string {
	if !f.has(key) {
		return ""
	}
	return f.enum(key, "", allowed...)
}

// count is the number of fields set to something other than null.
func (f *fields) count() int {
	n := 0
	for k := range f.vals {
		if f.has(k) {
			n++
		}
	}
	return n
}

func (f *fields) boolean(key string) bool {
	v := f.get(key)
	if v == nil {
		return false
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" {
		f.d.errorf(v, join(f.path, key), "expected true or false, found %s", describe(v))
		return false
	}
	var b bool
	if err := v.Decode(&b); err != nil {
		f.d.errorf(v, join(f.path, key), "%v", err)
	}
	return b
}

func (d *decoder) integer(v *yaml.Node, p string) (int64, bool) {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" {
		d.errorf(v, p, "expected an integer, found %s", describe(v))
		return 0, false
	}
	var n int64
	if err := v.Decode(&n); err != nil {
		d.errorf(v, p, "integer %s out of range", v.Value)
		return 0, false
	}
	return n, true
}

func (d *decoder) number(v *yaml.Node, p string) (float64, bool) {
	if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!int" && v.ShortTag() != "!!float") {
		d.errorf(v, p, "expected a number, found %s", describe(v))
		return 0, false
	}
	var x float64
	if err := v.Decode(&x); err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
		d.errorf(v, p, "expected a finite number, found %s", v.Value)
		return 0, false
	}
	return x, true
}

// scalar reads a typed scalar: string, int64, bool, and float64 when
// allowFloat. Null, lists and mappings are errors.
func (d *decoder) scalar(v *yaml.Node, p string, allowFloat bool) (any, bool) {
	if v.Kind == yaml.ScalarNode {
		switch v.ShortTag() {
		case "!!str":
			return v.Value, true
		case "!!int":
			return d.integer(v, p)
		case "!!bool":
			var b bool
			if err := v.Decode(&b); err != nil {
				d.errorf(v, p, "%v", err)
				return nil, false
			}
			return b, true
		case "!!float":
			if allowFloat {
				return d.number(v, p)
			}
		}
	}
	want := "a string, integer or boolean"
	if allowFloat {
		want = "a string, number or boolean"
	}
	d.errorf(v, p, "expected %s, found %s", want, describe(v))
	return nil, false
}

func (f *fields) duration(key string) Duration {
	s, v := f.str(key, false)
	if v == nil {
		return 0
	}
	p := join(f.path, key)
	dur, err := time.ParseDuration(s)
	if err != nil {
		f.d.errorf(v, p, "%q is not a Go duration (e.g. 90s, 15m, 4h)", s)
		return 0
	}
	if dur <= 0 {
		f.d.errorf(v, p, "%q must be positive", s)
		return 0
	}
	return Duration(dur)
}

func (f *fields) byteSize(key string) ByteSize {
	v := f.get(key)
	if v == nil {
		return 0
	}
	p := join(f.path, key)
	if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!str" && v.ShortTag() != "!!int") {
		f.d.errorf(v, p, "expected a size such as 512, 1GiB or 1.92TB, found %s", describe(v))
		return 0
	}
	b, err := ParseByteSize(v.Value)
	if err != nil {
		f.d.errorf(v, p, "%v", err)
		return 0
	}
	return b
}

// seq returns the items of a list field.
func (f *fields) seq(key string, required bool) []*yaml.Node {
	v := f.get(key)
	if v == nil {
		if required {
			f.missing(key)
		}
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		f.d.errorf(v, join(f.path, key), "expected a list, found %s", describe(v))
		return nil
	}
	if len(v.Content) == 0 && required {
		f.d.errorf(v, join(f.path, key), "must not be empty")
	}
	out := make([]*yaml.Node, len(v.Content))
	for i, c := range v.Content {
		out[i] = resolve(c)
	}
	return out
}

// Syntax checks shared by several fields.
var (
	nameRE       = lazyRegexp(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$`)
	sha256RE     = lazyRegexp(`^[0-9a-f]{64}$`)
	formatRE     = lazyRegexp(`^[a-z0-9][a-z0-9.+-]*$`)
	vendorIDRE   = lazyRegexp(`^0x[0-9a-fA-F]{4}$`)
	psidRE       = lazyRegexp(`^[A-Za-z0-9_]{1,16}$`)
	attributeRE  = lazyRegexp(`^[A-Za-z][A-Za-z0-9_]*$`)
	kernelNameRE = lazyRegexp(`^[a-z][a-z0-9]*$`)
)

func (d *decoder) checkName(v *yaml.Node, p, s string) {
	if v != nil && s != "" && !nameRE.MatchString(s) {
		d.errorf(v, p, "%q is not a valid name (letters, digits, '.', '_', '-'; starts and ends with a letter or digit)", s)
	}
}

func (d *decoder) checkGlob(v *yaml.Node, p, s string) {
	if v == nil || s == "" {
		return
	}
	if _, err := path.Match(s, ""); err != nil {
		d.errorf(v, p, "%q is not a valid glob: %v", s, err)
	}
}

func (d *decoder) checkURL(v *yaml.Node, p, s string) {
	if v == nil || s == "" {
		return
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		d.errorf(v, p, "%q is not a URL: %v", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		d.errorf(v, p, "%q must be an absolute http:// or https:// URL", s)
	case u.Host == "":
		d.errorf(v, p, "%q has no host", s)
	}
}

// labels reads metadata.labels: string keys to string values.
func (d *decoder) labels(v *yaml.Node, p string) map[string]string {
	if v == nil {
		return nil
	}
	if v.Kind != yaml.MappingNode {
		d.errorf(v, p, "expected a mapping, found %s", describe(v))
		return nil
	}
	out := map[string]string{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := resolve(v.Content[i]), resolve(v.Content[i+1])
		kp := join(p, k.Value)
		if _, dup := out[k.Value]; dup {
			d.errorf(k, kp, "duplicate key")
			continue
		}
		if k.Value == "" {
			d.errorf(k, p, "label keys must not be empty")
			continue
		}
		s, ok := d.scalarString(val, kp)
		if ok {
			out[k.Value] = s
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (d *decoder) metadata(v *yaml.Node, p string) Metadata {
	f := d.mapping(v, p, "name", "description", "labels")
	var m Metadata
	var n *yaml.Node
	m.Name, n = f.str("name", true)
	d.checkName(n, join(p, "name"), m.Name)
	m.Description, _ = f.str("description", false)
	m.Labels = d.labels(f.get("labels"), join(p, "labels"))
	return m
}

// formatFloat writes a float so that YAML reads it back as a float ("90.0",
// not "90", which would come back as an integer).
func formatFloat(x float64) string {
	s := strconv.FormatFloat(x, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEnN") {
		s += ".0"
	}
	return s
}
