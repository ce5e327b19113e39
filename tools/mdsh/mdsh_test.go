package mdsh

import (
	"strings"
	"testing"
)

const guide = "# Guide\n\n```sh\necho one\n```\n\n## Part\n\n```yaml\nk: v\n```\n\n```sh\n# a comment, not a heading\necho two\n```\n\n### Sub\n\n```sh\necho three\n```\n\n## Next\n\n```sh\necho four\n```\n"

func TestBlocks(t *testing.T) {
	bs, err := Blocks("g.md", guide)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range bs {
		got = append(got, b.Text)
	}
	if strings.Join(got, "|") != "echo one|# a comment, not a heading\necho two|echo three|echo four" || bs[0].Line != 3 || bs[1].Line != 13 {
		t.Fatalf("blocks %q, lines %d %d", got, bs[0].Line, bs[1].Line)
	}
	for doc, want := range map[string]string{
		"x\n```bash\nls\n```\n": "g.md:2: a \"bash\" block",
		"x\n\n```sh\nls\n":      "g.md:3: fence not closed",
	} {
		if _, err := Blocks("g.md", doc); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", doc, err, want)
		}
	}
}

func TestSectionBlocks(t *testing.T) {
	bs, err := SectionBlocks("g.md", guide, "## Part")
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 || bs[0].Line != 13 || bs[0].Text != "# a comment, not a heading\necho two" || bs[1].Text != "echo three" {
		t.Fatalf("## Part: %+v", bs)
	}
	if bs, err := SectionBlocks("g.md", guide, "### Sub"); err != nil || len(bs) != 1 || bs[0].Line != 20 {
		t.Fatalf("### Sub: %+v %v", bs, err)
	}
	if _, err := SectionBlocks("g.md", guide, "## Missing"); err == nil || !strings.Contains(err.Error(), `g.md: no heading "## Missing"`) {
		t.Fatalf("missing heading: %v", err)
	}
	if _, err := SectionBlocks("g.md", guide, "Part"); err == nil {
		t.Fatal("a heading without #: no error")
	}
}

func TestScript(t *testing.T) {
	s := Script("g.md", []Block{{Line: 3, Text: "echo one"}}, "set -x")
	if s != "set -euo pipefail\nset -x\n: g.md:3\necho one\n" {
		t.Fatalf("script %q", s)
	}
}

// FuzzSectionBlocks: any text either parses into blocks whose lines are
// fences of the text, or is refused; it never panics.
func FuzzSectionBlocks(f *testing.F) {
	f.Add(guide, "## Part")
	f.Add("```sh\n", "# G")
	f.Fuzz(func(t *testing.T, doc, heading string) {
		lines := strings.Split(doc, "\n")
		bs, err := SectionBlocks("f.md", doc, heading)
		if err != nil {
			return
		}
		for _, b := range bs {
			if b.Line < 1 || b.Line > len(lines) || strings.TrimSpace(lines[b.Line-1]) != "```sh" {
				t.Fatalf("block at line %d is not an sh fence of the text", b.Line)
			}
		}
	})
}
