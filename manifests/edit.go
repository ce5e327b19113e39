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
	// chunks (the image's chunk list) is optional: replaced where it is,
	// added after format where it is not, and removed when the new image
	// has none, so a list never outlives its image.
	var ck, fk *yaml.Node
	for i := 0; i+1 < len(node.Content); i += 2 {
		switch node.Content[i].Value {
		case "chunks":
			ck = node.Content[i]
		case "format":
			fk = node.Content[i]
		}
	}
	switch {
	case ck != nil && img.Chunks != "":
		v := mapValue(node, "chunks")
		if v.Line != ck.Line || v.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%s:%d: %s.chunks: put it on one line, then run this again", name, ck.Line, path)
		}
		out, err := lineEdit{col: v.Column, value: img.Chunks}.apply(lines[v.Line-1])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, v.Line, err)
		}
		lines[v.Line-1] = out
	case ck != nil:
		lines[ck.Line-1] = nil
	case img.Chunks != "":
		ln := lines[fk.Line-1]
		nl := ""
		if !bytes.HasSuffix(ln, []byte("\n")) {
			nl = "\n"
		}
		add := fmt.Sprintf("%s%schunks: %s\n", nl, strings.Repeat(" ", fk.Column-1), img.Chunks)
		lines[fk.Line-1] = append(append([]byte{}, ln...), add...)
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
