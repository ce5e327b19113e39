package schema

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"gopkg.in/yaml.v3"

	"github.com/cure-oss/cure/manifests"
)

//go:embed *.schema.json
var files embed.FS

// Files returns the published schema files by name (sku.schema.json...).
func Files() map[string][]byte {
	out := map[string][]byte{}
	for _, name := range []string{SKUFile, SuiteFile, NodesFile} {
		b, err := files.ReadFile(name)
		if err == nil {
			out[name] = b
		}
	}
	return out
}

type compiled struct {
	sch *jsonschema.Schema
	doc any // the schema as JSON, to name an object's known fields
}

var compile = sync.OnceValues(func() (map[string]compiled, error) {
	out := map[string]compiled{}
	for name, b := range Files() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", name, err)
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource(BaseURL+name, doc); err != nil {
			return nil, fmt.Errorf("schema %s: %w", name, err)
		}
		sch, err := c.Compile(BaseURL + name)
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", name, err)
		}
		out[name] = compiled{sch: sch, doc: doc}
	}
	return out, nil
})

// ValidateManifest checks a manifest against the schema of its kind
// (SKU or ValidationSuite); file names it in problems. A manifest of no
// known kind is not checked (the loader says what kind is wrong). The
// error says the file could not be checked (YAML syntax, too large); the
// loader reports those too.
func ValidateManifest(file string, data []byte) ([]manifests.FieldError, error) {
	root, err := parse(data)
	if err != nil || root == nil {
		return nil, err
	}
	var schemaFile string
	if root.Kind == yaml.MappingNode {
		if k := mappingValue(root, "kind"); k != nil {
			switch k.Value {
			case manifests.KindSKU:
				schemaFile = SKUFile
			case manifests.KindValidationSuite:
				schemaFile = SuiteFile
			}
		}
	}
	if schemaFile == "" {
		return nil, nil
	}
	return validate(schemaFile, file, root)
}

// ValidateNodes checks a YAML nodes file against nodes.schema.json.
func ValidateNodes(file string, data []byte) ([]manifests.FieldError, error) {
	root, err := parse(data)
	if err != nil || root == nil {
		return nil, err
	}
	return validate(NodesFile, file, root)
}

// parse returns the first document's root node (nil when there is none).
func parse(data []byte) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("YAML: %w", err)
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

func validate(schemaFile, file string, root *yaml.Node) ([]manifests.FieldError, error) {
	schemas, err := compile()
	if err != nil {
		return nil, err
	}
	s, ok := schemas[schemaFile]
	if !ok {
		return nil, fmt.Errorf("no schema %s", schemaFile)
	}
	v, problems, err := ToJSON(file, root)
	if err != nil {
		return nil, err
	}
	verr := s.sch.Validate(v)
	var ve *jsonschema.ValidationError
	if errors.As(verr, &ve) {
		r := reporter{file: file, schemaFile: schemaFile, root: root, doc: s.doc}
		r.leaves(ve)
		problems = append(problems, r.out...)
	} else if verr != nil {
		return nil, fmt.Errorf("validating %s: %w", file, verr)
	}
	slices.SortStableFunc(problems, func(a, b manifests.FieldError) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return strings.Compare(a.Field, b.Field)
	})
	return slices.Compact(problems), nil
}

var printer = message.NewPrinter(language.English)

// reporter turns the validator's error tree into problems on lines.
type reporter struct {
	file, schemaFile string
	root             *yaml.Node
	doc              any
	out              []manifests.FieldError
}

func (r *reporter) leaves(e *jsonschema.ValidationError) {
	if len(e.Causes) > 0 {
		for _, c := range e.Causes {
			r.leaves(c)
		}
		return
	}
	n, field := locate(r.root, e.InstanceLocation)
	add := func(n *yaml.Node, field, msg string) {
		r.out = append(r.out, manifests.FieldError{File: r.file, Line: n.Line, Field: field,
			Msg: msg + " (schema " + r.schemaFile + ")"})
	}
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		for _, m := range k.Missing {
			add(n, join(field, m), "required field is missing")
		}
	case *kind.AdditionalProperties:
		known := r.knownFields(e.SchemaURL)
		for _, p := range k.Properties {
			at := n
			if i := mappingKey(n, p); i >= 0 {
				at = n.Content[i]
			}
			add(at, join(field, p), "unknown field (known fields: "+strings.Join(known, ", ")+")")
		}
	case *kind.Type:
		add(n, field, fmt.Sprintf("expected %s, found %s", strings.Join(k.Want, " or "), describe(n)))
	case *kind.Enum:
		add(n, field, fmt.Sprintf("%s is not one of %s", describe(n), strings.Join(enumText(k.Want), ", ")))
	case *kind.Pattern:
		add(n, field, fmt.Sprintf("%q does not match %s", k.Got, k.Want))
	default:
		add(n, field, e.ErrorKind.LocalizedString(printer))
	}
}

// knownFields lists the properties of the schema object at url.
func (r *reporter) knownFields(url string) []string {
	_, frag, _ := strings.Cut(url, "#")
	v := r.doc
	for _, tok := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		m, ok := v.(map[string]any)
		if !ok || tok == "" {
			break
		}
		v = m[strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)]
	}
	m, _ := v.(map[string]any)
	props, _ := m["properties"].(map[string]any)
	var out []string
	for k := range props {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func enumText(want []any) []string {
	out := make([]string, len(want))
	for i, w := range want {
		out[i] = fmt.Sprint(w)
	}
	return out
}

// describe names what a node holds, for "expected X, found Y".
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
		case "!!null":
			return "null"
		}
		return strings.TrimPrefix(n.ShortTag(), "!!") + " " + n.Value
	}
	return "an unexpected node"
}
