// Package mdsh extracts the sh code blocks of a Markdown guide, so that a
// test runs exactly the commands the guide shows, in the order written
// (docs/SITE.md's walk, docs/OPERATIONS.md's three instances).
package mdsh

import (
	"fmt"
	"strings"
)

// Block is one sh block and the line its opening fence is on.
type Block struct {
	Line int
	Text string
}

// shellFences are the fence languages of command blocks: a guide writes
// them all as sh, so that every command it shows is one a test runs.
var shellFences = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true, "shell-session": true, "zsh": true}

// Blocks returns the sh blocks of a Markdown text in order. A command
// block in another shell language, or an unclosed fence, is an error
// naming its line: a test would not run it.
func Blocks(name, doc string) ([]Block, error) {
	return blocks(name, strings.Split(doc, "\n"), 0)
}

// SectionBlocks returns the sh blocks under heading (a whole line, e.g.
// "### Three instances on one host"), up to the next heading of its level
// or above; a missing heading is an error.
func SectionBlocks(name, doc, heading string) ([]Block, error) {
	lines := strings.Split(doc, "\n")
	level := headingLevel(heading)
	if level == 0 {
		return nil, fmt.Errorf("%s: %q is not a Markdown heading", name, heading)
	}
	start, end, fenced := -1, len(lines), false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		switch {
		case fenced:
		case start < 0 && strings.TrimRight(l, " \t\r") == heading:
			start = i + 1
		case start >= 0 && headingLevel(l) > 0 && headingLevel(l) <= level:
			end = i
		}
		if end < len(lines) {
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("%s: no heading %q", name, heading)
	}
	return blocks(name, lines[start:end], start)
}

// headingLevel is the level of an ATX heading line, 0 for other lines.
func headingLevel(l string) int {
	n := len(l) - len(strings.TrimLeft(l, "#"))
	if n == 0 || n > 6 || len(l) == n || l[n] != ' ' {
		return 0
	}
	return n
}

// blocks parses lines, the first of which is line offset+1 of the file.
func blocks(name string, lines []string, offset int) ([]Block, error) {
	var out []Block
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "```") {
			continue
		}
		lang := strings.TrimSpace(strings.TrimPrefix(l, "```"))
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) != "```" {
			j++
		}
		if j == len(lines) {
			return nil, fmt.Errorf("%s:%d: fence not closed", name, offset+i+1)
		}
		if lang == "sh" {
			out = append(out, Block{Line: offset + i + 1, Text: strings.Join(lines[i+1:j], "\n")})
		} else if shellFences[lang] {
			return nil, fmt.Errorf("%s:%d: a %q block: write command blocks as sh (the test runs exactly those)", name, offset+i+1, lang)
		}
		i = j
	}
	return out, nil
}

// Script is the blocks as one bash script: strict mode, then prelude (a
// cleanup trap, set -x), then each block announced with ": name:line", the
// marker a test finds in bash's trace to tell which block ran when.
func Script(name string, blocks []Block, prelude string) string {
	var b strings.Builder
	b.WriteString("set -euo pipefail\n")
	b.WriteString(prelude)
	if prelude != "" && !strings.HasSuffix(prelude, "\n") {
		b.WriteString("\n")
	}
	for _, bl := range blocks {
		fmt.Fprintf(&b, ": %s:%d\n%s\n", name, bl.Line, bl.Text)
	}
	return b.String()
}
