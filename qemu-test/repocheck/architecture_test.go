// Package repocheck holds checks over the repository itself rather than over
// one package's behaviour.
package repocheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the module root: two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	return root
}

// goPackageDirs lists every directory holding a non-generated Go file,
// relative to root, skipping build output, caches and testdata.
func goPackageDirs(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "out" || name == "testdata" || name == "bin" || name == "state") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") {
			rel, err := filepath.Rel(root, filepath.Dir(p))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for d := range seen {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	return dirs
}

// TestEveryPackageInArchitecture: a newcomer reads docs/ARCHITECTURE.md to
// find where things live, so every directory with Go code must be named
// there (as a path, in backquotes or a table cell).
func TestEveryPackageInArchitecture(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	dirs := goPackageDirs(t, root)
	if len(dirs) < 20 {
		t.Fatalf("found only %d Go package directories under %s: the walk is wrong", len(dirs), root)
	}
	var missing []string
	for _, d := range dirs {
		if d == "." {
			continue
		}
		// A path counts when it appears whole: not as the prefix of a
		// longer path (tools/gpu inside tools/gpu/driver does not name it).
		re := regexp.MustCompile(`(^|[^A-Za-z0-9_./-])` + regexp.QuoteMeta(d) + `/?($|[^A-Za-z0-9_.-]|/[^A-Za-z0-9_])`)
		if !re.MatchString(text) {
			missing = append(missing, d)
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/ARCHITECTURE.md does not name %d package directories:\n  %s", len(missing), strings.Join(missing, "\n  "))
	}
}
