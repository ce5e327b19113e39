package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// One build of every binary, shared by TestVersionFlag and
// TestDebPackageContents, removed after the package's tests.
var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
	buildRevs [2]string // HEAD's revision before and after the build
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// TestVersionFlag builds every binary of the module in one go build (one
// build cache: the packages are those `go test ./...` already compiled)
// and asks each for its --version line.
func TestVersionFlag(t *testing.T) {
	dir := builtBinaries(t)
	for _, b := range Binaries {
		t.Run(b.Name, func(t *testing.T) {
			out, err := exec.Command(filepath.Join(dir, b.Name), "--version").CombinedOutput()
			if err != nil {
				t.Fatalf("%s --version: %v\n%s", b.Name, err, out)
			}
			// "<binary> <version> (<revision12>[+dirty], <goversion>)"
			re := regexp.MustCompile(`^` + regexp.QuoteMeta(b.Name) + ` (\S+) \(([0-9a-f]{12})(\+dirty)?, (go1\.\S+)\)\n$`)
			m := re.FindStringSubmatch(string(out))
			if m == nil {
				t.Fatalf("%s --version printed %q, want the line %s", b.Name, out, re)
			}
			if m[2] != buildRevs[0] && m[2] != buildRevs[1] {
				t.Errorf("%s --version names revision %s, the checkout was at %s (%s after the build)", b.Name, m[2], buildRevs[0], buildRevs[1])
			}
		})
	}
}

// builtBinaries builds Binaries once per test binary into a shared
// directory (TestDebPackageContents packs the same ones).
func builtBinaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		start := time.Now()
		// HEAD before and after: a commit made meanwhile (a shared
		// checkout) may be the one the build stamped.
		buildRevs[0] = gitOutput(t, "rev-parse", "HEAD")[:12]
		defer func() { buildRevs[1] = gitOutput(t, "rev-parse", "HEAD")[:12] }()
		buildDir, buildErr = os.MkdirTemp("", "cure-release-bin-")
		if buildErr != nil {
			return
		}
		buildErr = BuildBinaries(t.Context(), repoRoot(t), buildDir, Binaries, BuildOptions{})
		t.Logf("built %d binaries in %s", len(Binaries), time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

func repoRoot(t *testing.T) string {
	t.Helper()
	return gitOutput(t, "rev-parse", "--show-toplevel")
}

func gitOutput(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}
