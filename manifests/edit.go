package manifests

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// ImageFormatOf is the spec.os.image format of an image file, from its
// name (disk.raw.zst is raw.zst; a name with no known suffix is raw).
func ImageFormatOf(name string) string {
	n := strings.ToLower(name)
	switch {
	case strings.HasSuffix(n, ".zst"):
		return ImageRawZstd
	case strings.HasSuffix(n, ".gz"):
		return ImageRawGzip
	case strings.HasSuffix(n, ".xz"):
		return ImageRawXz
	case strings.HasSuffix(n, ".qcow2"):
		return ImageQcow2
	}
	return ImageRaw
}

// SetOSImage returns the SKU manifest data (read from name) with
// spec.os.image's sha256, size and format set to img, every other byte
// (comments, order, layout) as it was; the result is checked to parse as a
// SKU with exactly that image. A SKU without spec.os.image, or one lacking
// one of the three keys, is an error naming the missing field. chunks is
// set, added or removed to match img.Chunks.
func SetOSImage(name string, data []byte, img Artifact) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: empty document", name)
	}
	node, path := doc.Content[0], ""
	for _, k := range []string{"spec", "os", "image"} {
		path = join(path, k)
		if node = mapValue(node, k); node == nil {
			return nil, fmt.Errorf("%s: %s: missing: the SKU installs no OS image (see manifests/examples/qemu-nvme.yaml for the block)", name, path)
		}
	}
	edits := map[int]lineEdit{}
	for _, f := range []struct{ key, value string }{
		{"sha256", img.SHA256}, {"size", strconv.FormatInt(img.Size, 10)}, {"format", img.Format},
	} {
		v := mapValue(node, f.key)
		if v == nil || v.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%s:%d: %s.%s: missing: add it, then run this again", name, node.Line, path, f.key)
		}
		if _, dup := edits[v.Line]; dup {
			return nil, fmt.Errorf("%s:%d: %s: written in flow style: put sha256, size and format on lines of their own, then run this again", name, v.Line, path)
		}
		edits[v.Line] = lineEdit{col: v.Column, value: f.value}
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	for ln, e := range edits {
		if ln < 1 || ln > len(lines) {
			return nil, fmt.Errorf("%s:%d: cannot edit this line", name, ln)
		}
		out, err := e.apply(lines[ln-1])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, ln, err)
		}
		lines[ln-1] = out
	}
	// chunks (the image's chunk list) and url (where nodes fetch it) are
	// optional: replaced where they are, added after format where they are
	// not, and removed when the new image has none, so neither outlives its
	// image (an imported image is served from the artifact store, so a url
	// naming another copy of the old image is dropped).
	var fk *yaml.Node
	for i := 0; i+1 < len(node.Content); i += 2 {
		if node.Content[i].Value == "format" {
			fk = node.Content[i]
		}
	}
	for _, o := range []struct{ key, value string }{{"chunks", img.Chunks}, {"url", img.URL}} {
		if err := setOptional(name, path, node, fk, lines, o.key, o.value); err != nil {
			return nil, err
		}
	}
	edited := bytes.Join(lines, nil)
	sku, err := ParseSKU(name, edited)
	if err != nil {
		return nil, fmt.Errorf("%s after setting spec.os.image: %w", name, err)
	}
	if got := sku.Spec.OS.Image; got.SHA256 != img.SHA256 || got.Size != img.Size || got.Format != img.Format || got.URL != img.URL || got.Chunks != img.Chunks {
		return nil, fmt.Errorf("%s: spec.os.image reads back as %+v, want %+v", name, got, img)
	}
	return edited, nil
}

// setOptional sets, adds (after format) or removes the one-line key of the
// image mapping node in lines.
func setOptional(name, path string, node, format *yaml.Node, lines [][]byte, key, value string) error {
	var k *yaml.Node
	for i := 0; i+1 < len(node.Content); i += 2 {
		if node.Content[i].Value == key {
			k = node.Content[i]
		}
	}
	switch {
	case k != nil && value != "":
		v := mapValue(node, key)
		if v.Line != k.Line || v.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s:%d: %s.%s: put it on one line, then run this again", name, k.Line, path, key)
		}
		out, err := lineEdit{col: v.Column, value: value}.apply(lines[v.Line-1])
		if err != nil {
			return fmt.Errorf("%s:%d: %w", name, v.Line, err)
		}
		lines[v.Line-1] = out
	case k != nil:
		if v := mapValue(node, key); v.Line != k.Line {
			return fmt.Errorf("%s:%d: %s.%s: put it on one line, then run this again", name, k.Line, path, key)
		}
		lines[k.Line-1] = nil
	case value != "":
		ln := lines[format.Line-1]
		nl := ""
		if !bytes.HasSuffix(ln, []byte("\n")) {
			nl = "\n"
		}
		add := fmt.Sprintf("%s%s%s: %s\n", nl, strings.Repeat(" ", format.Column-1), key, value)
		lines[format.Line-1] = append(append([]byte{}, ln...), add...)
	}
	return nil
}

func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// lineEdit replaces the scalar that starts at column col (1-based) of a
// line, keeping what follows it (a comment).
type lineEdit struct {
	col   int
	value string
}

func (e lineEdit) apply(line []byte) ([]byte, error) {
	start := e.col - 1
	if start < 0 || start >= len(line) {
		return nil, fmt.Errorf("no value at column %d", e.col)
	}
	rest := line[start:]
	end := 0
	switch rest[0] {
	case '"', '\'':
		q := rest[0]
		i := 1
		for i < len(rest) && rest[i] != q {
			if q == '"' && rest[i] == '\\' {
				i++
			}
			i++
		}
		if i >= len(rest) {
			return nil, fmt.Errorf("unterminated quoted value")
		}
		end = i + 1
	default:
		end = len(bytes.TrimRight(rest, "\r\n"))
		if i := bytes.Index(rest[:end], []byte(" #")); i >= 0 {
			end = i
		}
		end = len(bytes.TrimRight(rest[:end], " \t"))
		if bytes.ContainsAny(rest[:end], "{}[],") {
			return nil, fmt.Errorf("a flow-style value cannot be edited in place: write the key on its own line")
		}
	}
	out := append([]byte{}, line[:start]...)
	out = append(out, e.value...)
	return append(out, rest[end:]...), nil
}
