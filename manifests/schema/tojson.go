package schema

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/cure-oss/cure/manifests"
)

// Bounds on one conversion: an alias repeats its anchor's whole subtree,
// so a small file can name a huge value ("billion laughs").
const (
	maxValues = 1 << 20
	maxDepth  = 256
)

// converter turns a yaml.v3 node tree into the JSON value a validator
// reads, noting what JSON cannot hold.
type converter struct {
	file     string
	values   int
	problems []manifests.FieldError
}

// ToJSON converts the YAML value n to a JSON value: map[string]any,
// []any, string, json.Number, bool or nil. As the loaders read them, a
// mapping key set to null is absent, scalar keys are their text, and
// the first of duplicate keys counts; keys that are not scalars and
// duplicates are returned as problems (file names them). Integers and
// floats become json.Number, except .inf and .nan, which JSON cannot
// hold: they stay their text. An error means the value is too large or
// too deep to convert.
func ToJSON(file string, n *yaml.Node) (any, []manifests.FieldError, error) {
	c := &converter{file: file}
	v, err := c.value(n, "", 0)
	if err != nil {
		return nil, nil, err
	}
	return v, c.problems, nil
}

func (c *converter) value(n *yaml.Node, path string, depth int) (any, error) {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil {
		return nil, nil
	}
	c.values++
	if c.values > maxValues || depth > maxDepth {
		return nil, fmt.Errorf("%s:%d: %s: more than %d values or %d levels once aliases are expanded", c.file, n.Line, path, maxValues, maxDepth)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return c.value(n.Content[0], path, depth+1)
	case yaml.MappingNode:
		return c.mapping(n, path, depth)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for i, item := range n.Content {
			v, err := c.value(item, fmt.Sprintf("%s[%d]", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.ScalarNode:
		return scalar(n), nil
	}
	return nil, fmt.Errorf("%s:%d: %s: unexpected YAML node kind %d", c.file, n.Line, path, n.Kind)
}

func (c *converter) mapping(n *yaml.Node, path string, depth int) (any, error) {
	out := map[string]any{}
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		for k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			c.problems = append(c.problems, manifests.FieldError{File: c.file, Line: k.Line, Field: path, Msg: "keys must be strings, found a " + kindName(k)})
			continue
		}
		field := join(path, k.Value)
		if line, dup := first[k.Value]; dup {
			c.problems = append(c.problems, manifests.FieldError{File: c.file, Line: k.Line, Field: field, Msg: fmt.Sprintf("duplicate key (first set on line %d)", line)})
			continue
		}
		first[k.Value] = k.Line
		if isNull(v) {
			continue // the loaders read key: null as the key absent
		}
		x, err := c.value(v, field, depth+1)
		if err != nil {
			return nil, err
		}
		out[k.Value] = x
	}
	return out, nil
}

func isNull(n *yaml.Node) bool {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n == nil || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// scalar is a scalar's JSON value by its resolved YAML tag.
func scalar(n *yaml.Node) any {
	switch n.ShortTag() {
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if n.Decode(&b) == nil {
			return b
		}
	case "!!int":
		var i int64
		if n.Decode(&i) == nil {
			return json.Number(strconv.FormatInt(i, 10))
		}
		var u uint64
		if n.Decode(&u) == nil {
			return json.Number(strconv.FormatUint(u, 10))
		}
		if b, ok := new(big.Int).SetString(n.Value, 0); ok {
			return json.Number(b.String())
		}
	case "!!float":
		var f float64
		if n.Decode(&f) == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
		}
	}
	return n.Value
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "node"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// locate follows a JSON instance location from the document's root node
// to the node it names, and spells the location as the loaders do
// ("spec.firmware[3].version"). It stops at the deepest node it finds.
func locate(root *yaml.Node, loc []string) (*yaml.Node, string) {
	n, path := root, ""
	for _, tok := range loc {
		for n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		var next *yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			next = mappingValue(n, tok)
			path = join(path, tok)
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(n.Content) {
				next = n.Content[i]
			}
			path = fmt.Sprintf("%s[%s]", path, tok)
		}
		if next == nil {
			return n, path
		}
		n = next
	}
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n, path
}

// mappingValue is the value of key's first occurrence in the mapping m.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if k := mappingKey(m, key); k >= 0 {
		return m.Content[k+1]
	}
	return nil
}

// mappingKey is the index in m.Content of key's first occurrence, or -1.
func mappingKey(m *yaml.Node, key string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		for k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind == yaml.ScalarNode && k.Value == key {
			return i
		}
	}
	return -1
}
