package schema

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"

	"github.com/invopop/jsonschema"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/nodes"
)

const module = "github.com/cure-oss/cure"

// BaseURL prefixes each schema's $id (the files' place in the repository).
const BaseURL = "https://github.com/cure-oss/cure/raw/main/manifests/schema/"

// The published schema files.
const (
	SKUFile   = "sku.schema.json"
	SuiteFile = "suite.schema.json"
	NodesFile = "nodes.schema.json"
)

// durationPattern is what time.ParseDuration reads, without a sign other
// than '+' (the loader refuses a duration that is not positive).
const durationPattern = `^\+?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`

// byteSizePattern is what manifests.ParseByteSize reads.
const byteSizePattern = `^\s*[0-9]+(\.[0-9]+)?\s*([KkMmGgTtPp][Ii]?)?[Bb]?\s*$`

// Generate builds the three schema files from the Go types: the
// manifests package's (SKU, ValidationSuite) and the nodes package's
// (File). Field descriptions are the Go comments, read from the source
// next to this file, so it runs in a checkout (go generate, tests).
func Generate() (map[string][]byte, error) {
	out := map[string][]byte{}
	used := map[string]bool{}
	for file, build := range map[string]func(map[string]bool) (*jsonschema.Schema, error){
		SKUFile: skuSchema, SuiteFile: suiteSchema, NodesFile: nodesSchema,
	} {
		s, err := build(used)
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", file, err)
		}
		s.ID = jsonschema.ID(BaseURL + file)
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", file, err)
		}
		out[file] = append(b, '\n')
	}
	for key := range manifests.SchemaFields() {
		if !used[key] {
			return nil, fmt.Errorf("field rule %s: no such type and field in the manifests", key)
		}
	}
	return out, nil
}

func reflector() (*jsonschema.Reflector, error) {
	r := &jsonschema.Reflector{
		FieldNameTag:               "yaml",
		RequiredFromJSONSchemaTags: true, // required comes from manifests.SchemaFields
		ExpandedStruct:             true,
		Anonymous:                  true,
		Mapper:                     mapper,
	}
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return nil, fmt.Errorf("locating the source for Go comments")
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("reading Go comments: %w", err)
	}
	// AddGoComments names a package base joined with the directory it
	// walks, relative to the working directory.
	root := filepath.Join(filepath.Dir(self), "..", "..")
	fromRoot, err1 := filepath.Rel(root, cwd)
	toRoot, err2 := filepath.Rel(cwd, root)
	if err := cmp.Or(err1, err2); err != nil {
		return nil, fmt.Errorf("reading Go comments: %w", err)
	}
	base := path.Join(module, filepath.ToSlash(fromRoot))
	for _, pkg := range []string{"manifests", "provisioner-lite/nodes"} {
		if err := r.AddGoComments(base, filepath.Join(toRoot, pkg), jsonschema.WithFullComment()); err != nil {
			return nil, fmt.Errorf("reading Go comments of %s: %w", pkg, err)
		}
	}
	return r, nil
}

// mapper gives the manifests' custom scalars their written form.
func mapper(t reflect.Type) *jsonschema.Schema {
	switch t {
	case reflect.TypeFor[manifests.Duration]():
		return &jsonschema.Schema{Type: "string", Pattern: durationPattern,
			Description: "A Go duration: a positive number with a unit (ns, us, ms, s, m, h), e.g. 90s, 15m, 4h, 1h30m.",
			Examples:    []any{"90s", "15m", "4h"}}
	case reflect.TypeFor[manifests.ByteSize]():
		return &jsonschema.Schema{Pattern: byteSizePattern, Minimum: "1",
			Description: "A size in bytes: an integer, or a number with a unit: B, KB/MB/GB/TB/PB (powers of 10) or KiB/MiB/GiB/TiB/PiB (powers of 2), e.g. 512, 1GiB, 1.92TB.",
			Extras:      map[string]any{"type": []string{"string", "integer"}}}
	}
	return nil
}

func skuSchema(used map[string]bool) (*jsonschema.Schema, error) {
	r, err := reflector()
	if err != nil {
		return nil, err
	}
	s := r.Reflect(&manifests.SKU{})
	s.Title = "CURE SKU manifest (" + manifests.APIVersion + ")"
	defs := s.Definitions
	defs["SKU"] = s
	// OS.image is an Artifact that may pin a chunk list and whose format
	// is an image format; a firmware artifact is neither.
	img, err := clone(defs["Artifact"])
	if err != nil {
		return nil, err
	}
	img.Description = "The OS image as served (sha256 and size of the file, compressed or not)."
	defs["OSImage"] = img
	defs["OS"].Properties.Set("image", &jsonschema.Schema{Ref: "#/$defs/OSImage"})
	defs["Artifact"].Properties.Delete("chunks")
	defs["BIOS"].Properties.Value("settings").AdditionalProperties = scalarTypes("string", "integer", "boolean")
	return finish(s, defs, manifests.KindSKU, used)
}

func suiteSchema(used map[string]bool) (*jsonschema.Schema, error) {
	r, err := reflector()
	if err != nil {
		return nil, err
	}
	s := r.Reflect(&manifests.ValidationSuite{})
	s.Title = "CURE validation suite (" + manifests.APIVersion + ")"
	defs := s.Definitions
	defs["ValidationSuite"] = s
	// Stages (and a stage's checks) are written nested, not as the Go
	// fields they are decoded into (those carry yaml:"-").
	stage := r.Reflect(&manifests.Stage{})
	for name, d := range stage.Definitions {
		defs[name] = d
	}
	stage.Definitions, stage.Version = nil, ""
	stage.Properties.Set("checks", &jsonschema.Schema{Type: "array", MinItems: ptr(1), Items: &jsonschema.Schema{Ref: "#/$defs/Check"},
		Description: "The stage's checks, run at the same time."})
	defs["Stage"] = stage
	spec := defs["ValidationSuiteSpec"]
	spec.Properties.Set("stages", &jsonschema.Schema{Type: "array", MinItems: ptr(1), Items: &jsonschema.Schema{Ref: "#/$defs/Stage"},
		Description: "Groups of checks that run at once, one group after another; set either stages or checks."})
	spec.Properties.Value("checks").Description = "The checks, one after another; set either checks or stages."
	params := scalarTypes("string", "number", "boolean", "array")
	params.Items = scalarTypes("string", "number", "boolean")
	defs["Check"].Properties.Value("params").AdditionalProperties = params
	equals := defs["Threshold"].Properties.Value("equals")
	equals.Extras = map[string]any{"type": []string{"string", "number", "boolean"}}
	return finish(s, defs, manifests.KindValidationSuite, used)
}

func nodesSchema(_ map[string]bool) (*jsonschema.Schema, error) {
	r, err := reflector()
	if err != nil {
		return nil, err
	}
	r.ExpandedStruct = false
	s := r.Reflect(&nodes.File{})
	defs := s.Definitions
	*s = jsonschema.Schema{
		Version:     s.Version,
		Title:       "CURE nodes file",
		Description: "The site's node inventory: a `nodes:` list, or one node's mapping (a snippet for `curectl nodes add -f`).",
		If:          &jsonschema.Schema{Required: []string{"id"}, Not: &jsonschema.Schema{Required: []string{"nodes"}}},
		Then:        &jsonschema.Schema{Ref: "#/$defs/FileNode"},
		Else:        &jsonschema.Schema{Ref: "#/$defs/File"},
		Definitions: defs,
	}
	defs["File"].Properties.Value("nodes").MinItems = ptr(1)
	defs["FileNode"].Properties.Value("macs").MinItems = ptr(1)
	fields := map[string]manifests.SchemaField{}
	for _, k := range []string{"File.nodes", "FileNode.id", "FileNode.bmc", "FileNode.macs", "FileBMC.url", "FileBMC.username", "FileCable.port"} {
		fields[k] = manifests.SchemaField{Required: true}
	}
	// Any scalar is read as text (a null as empty).
	widen(defs, []string{"string", "number", "boolean"})
	used := map[string]bool{}
	if err := apply(defs, fields, used); err != nil {
		return nil, err
	}
	if len(used) != len(fields) {
		return nil, fmt.Errorf("a nodes field rule names no field")
	}
	return s, nil
}

// finish sets apiVersion and kind, widens strings and applies the
// manifests' field rules.
func finish(s *jsonschema.Schema, defs jsonschema.Definitions, kind string, used map[string]bool) (*jsonschema.Schema, error) {
	s.Properties.Set("apiVersion", &jsonschema.Schema{Type: "string", Const: manifests.APIVersion})
	s.Properties.Set("kind", &jsonschema.Schema{Type: "string", Const: kind})
	// The loader reads an unquoted number as the text written ("7.10").
	widen(defs, []string{"string", "number"})
	err := apply(defs, manifests.SchemaFields(), used)
	delete(defs, s.Properties.Value("kind").Const.(string))
	return s, err
}

// widen lets every plain string field take the other scalar types the
// loader reads as text.
func widen(defs jsonschema.Definitions, types []string) {
	var walk func(*jsonschema.Schema)
	walk = func(s *jsonschema.Schema) {
		if s == nil {
			return
		}
		if s.Type == "string" && s.Pattern == "" && s.Enum == nil && s.Const == nil {
			s.Type = ""
			s.Extras = map[string]any{"type": types}
		}
		walk(s.Items)
		walk(s.AdditionalProperties)
		if s.Properties != nil {
			for _, p := range s.Properties.FromOldest() {
				walk(p)
			}
		}
	}
	for _, d := range defs {
		walk(d)
	}
}

// apply sets required, enum, default, pattern and range from fields on
// the types defs has, marking the keys it used, and refuses a key that
// names a type of defs but none of its fields (a stale entry).
func apply(defs jsonschema.Definitions, fields map[string]manifests.SchemaField, used map[string]bool) error {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		f := fields[key]
		def, prop, _ := cutLast(key)
		d := defs[def]
		if d == nil || d.Properties == nil {
			continue // another file's type
		}
		p, ok := d.Properties.Get(prop)
		if !ok {
			return fmt.Errorf("field rule %s: %s has no field %s", key, def, prop)
		}
		used[key] = true
		if f.Required {
			d.Required = append(d.Required, prop)
		}
		applyValue(p, f)
	}
	for _, d := range defs {
		if d.Properties == nil || len(d.Required) == 0 {
			continue
		}
		order := map[string]int{}
		i := 0
		for k := range d.Properties.KeysFromOldest() {
			order[k] = i
			i++
		}
		slices.SortFunc(d.Required, func(a, b string) int { return order[a] - order[b] })
	}
	return nil
}

func applyValue(p *jsonschema.Schema, f manifests.SchemaField) {
	target := p
	switch {
	case p.Type == "array" && p.Items != nil:
		target = p.Items
	case p.Type == "object" && f.Pattern != "":
		p.PropertyNames = &jsonschema.Schema{Pattern: f.Pattern}
		p.MinProperties = ptr(1)
		target = nil
	}
	if target != nil && f.Pattern != "" {
		target.Pattern = f.Pattern
	}
	if f.Enum != nil {
		p.Type, p.Extras = "string", nil
		for _, e := range f.Enum {
			p.Enum = append(p.Enum, e)
		}
	}
	if f.Default != nil {
		p.Default = f.Default
	}
	if len(f.Range) > 0 {
		p.Minimum = json.Number(strconv.FormatInt(f.Range[0], 10))
	}
	if len(f.Range) > 1 {
		p.Maximum = json.Number(strconv.FormatInt(f.Range[1], 10))
	}
}

func cutLast(key string) (string, string, bool) {
	for i := len(key) - 1; i >= 0; i-- {
		if key[i] == '.' {
			return key[:i], key[i+1:], true
		}
	}
	return "", "", false
}

func scalarTypes(types ...string) *jsonschema.Schema {
	return &jsonschema.Schema{Extras: map[string]any{"type": types}}
}

func clone(s *jsonschema.Schema) (*jsonschema.Schema, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("copying a schema: %w", err)
	}
	var c jsonschema.Schema
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("copying a schema: %w", err)
	}
	return &c, nil
}

func ptr(n uint64) *uint64 { return &n }
