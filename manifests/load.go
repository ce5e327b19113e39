package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// LoadFile reads and validates the manifest at path; errors name path:line.
func LoadFile(path string) (*Document, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading manifest: %w", err)
	}
	return Parse(path, data)
}

// LoadSKU reads a manifest that must be a SKU.
func LoadSKU(path string) (*SKU, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading SKU manifest: %w", err)
	}
	return ParseSKU(path, data)
}

// ParseSKU parses a manifest that must be a SKU; name is used in errors.
func ParseSKU(name string, data []byte) (*SKU, error) {
	doc, err := Parse(name, data)
	if err != nil {
		return nil, err
	}
	if doc.SKU == nil {
		return nil, &ValidationError{Errors: []FieldError{{File: name, Line: 1, Field: "kind",
			Msg: fmt.Sprintf("expected %s, found %s", KindSKU, doc.Kind)}}}
	}
	return doc.SKU, nil
}

// ParseSuite parses a manifest that must be a ValidationSuite.
func ParseSuite(name string, data []byte) (*ValidationSuite, error) {
	doc, err := Parse(name, data)
	if err != nil {
		return nil, err
	}
	if doc.Suite == nil {
		return nil, &ValidationError{Errors: []FieldError{{File: name, Line: 1, Field: "kind",
			Msg: fmt.Sprintf("expected %s, found %s", KindValidationSuite, doc.Kind)}}}
	}
	return doc.Suite, nil
}

// Parse decodes and validates one manifest document. name (usually the file
// path) prefixes every error. Any problem yields a *ValidationError listing
// all of them.
func Parse(name string, data []byte) (*Document, error) {
	d := &decoder{file: name}
	root, ferr := single(name, data)
	if ferr != nil {
		return nil, &ValidationError{Errors: []FieldError{*ferr}}
	}
	top := d.mapping(root, "", "apiVersion", "kind", "metadata", "spec")
	doc := &Document{}
	if api, v := top.str("apiVersion", true); v != nil && api != "" && api != APIVersion {
		d.errorf(v, "apiVersion", "%q is not supported (want %s)", api, APIVersion)
	}
	kind, kv := top.str("kind", true)
	doc.Kind = kind
	switch {
	case kv == nil || kind == "":
	case kind == KindSKU:
		doc.SKU = d.sku(top)
	case kind == KindValidationSuite:
		doc.Suite = d.suite(top)
	default:
		d.errorf(kv, "kind", "%q is not a manifest kind (want %s or %s)", kind, KindSKU, KindValidationSuite)
	}
	if len(d.errs) > 0 {
		e := &ValidationError{Errors: d.errs}
		e.sort()
		return nil, e
	}
	return doc, nil
}

// single returns the root node of the one document in data.
func single(name string, data []byte) (*yaml.Node, *FieldError) {
	empty := &FieldError{File: name, Msg: "empty manifest: no YAML document"}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, empty
		}
		return nil, syntaxError(name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &FieldError{File: name, Line: extra.Line,
			Msg: "a manifest file holds one document, found another after '---'"}
	} else if !errors.Is(err, io.EOF) {
		return nil, syntaxError(name, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, empty
	}
	return doc.Content[0], nil
}

var yamlLineRE = lazyRegexp(`^(?:yaml: )?line (\d+): (.*)$`)

// syntaxError turns "yaml: line 7: did not find expected key" into a
// FieldError on line 7.
func syntaxError(name string, err error) *FieldError {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &FieldError{File: name, Line: line, Msg: "YAML syntax: " + m[2]}
	}
	return &FieldError{File: name, Msg: "YAML syntax: " + strings.TrimPrefix(msg, "yaml: ")}
}

// Marshal writes a manifest (SKU, ValidationSuite or Document, by value or
// pointer) as YAML that Parse reads back to an equal value. apiVersion and
// kind are filled in when empty. The output is parsed again before it is
// returned, so a manifest edited into an invalid state is refused here, not
// on the node.
func Marshal(doc any) ([]byte, error) {
	var v any
	var name string
	switch x := doc.(type) {
	case *Document:
		if x == nil {
			return nil, errors.New("marshal manifest: nil document")
		}
		switch {
		case x.SKU != nil:
			return Marshal(x.SKU)
		case x.Suite != nil:
			return Marshal(x.Suite)
		}
		return nil, errors.New("marshal manifest: document has neither SKU nor Suite")
	case SKU:
		return Marshal(&x)
	case ValidationSuite:
		return Marshal(&x)
	case *SKU:
		if x == nil {
			return nil, errors.New("marshal manifest: nil SKU")
		}
		c := *x
		c.APIVersion, c.Kind = orDefault(c.APIVersion, APIVersion), orDefault(c.Kind, KindSKU)
		v, name = &c, c.Metadata.Name
	case *ValidationSuite:
		if x == nil {
			return nil, errors.New("marshal manifest: nil ValidationSuite")
		}
		c := *x
		c.APIVersion, c.Kind = orDefault(c.APIVersion, APIVersion), orDefault(c.Kind, KindValidationSuite)
		v, name = &c, c.Metadata.Name
	default:
		return nil, fmt.Errorf("marshal manifest: unsupported type %T (want SKU, ValidationSuite or Document)", doc)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("marshal manifest %q: %w", name, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("marshal manifest %q: %w", name, err)
	}
	if _, err := Parse("marshalled manifest "+strconv.Quote(name), buf.Bytes()); err != nil {
		return nil, fmt.Errorf("marshal manifest %q: result does not validate:\n%w", name, err)
	}
	return buf.Bytes(), nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
