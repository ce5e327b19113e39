package coordinator

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/pipeline"
)

// TestImageToolBundleProblem: a coordinator that serves no bundle, or
// another one than the image pins, is told so at start; the same bundle,
// or an image that pins none, is not a problem.
func TestImageToolBundleProblem(t *testing.T) {
	dir := t.TempDir()
	sum := strings.Repeat("ab", 32)
	os.WriteFile(filepath.Join(dir, "report.json"), []byte(`{"kind":"image","tool_bundle":{"path":"/etc/cure/toolbundle.json","sha256":"`+sum+`","size":1234,"tools":["nvme"]}}`), 0o644)
	same := &pipeline.ToolBundle{SHA256: sum, Size: 1234, Tools: []string{"nvme"}}
	other := &pipeline.ToolBundle{SHA256: strings.Repeat("cd", 32), Size: 1234}
	if got := imageToolBundleProblem(dir, same); got != "" {
		t.Errorf("same bundle: %q", got)
	}
	if got := imageToolBundleProblem(dir, nil); !strings.Contains(got, "pins tool bundle abababababab and this coordinator serves none") || !strings.Contains(got, "--tool-bundle") {
		t.Errorf("none served: %q", got)
	}
	if got := imageToolBundleProblem(dir, other); !strings.Contains(got, "serves cdcdcdcdcdcd (1234 bytes)") || !strings.Contains(got, "refuse") {
		t.Errorf("another served: %q", got)
	}
	old := t.TempDir()
	os.WriteFile(filepath.Join(old, "report.json"), []byte(`{"kind":"image"}`), 0o644)
	if got := imageToolBundleProblem(old, nil); got != "" {
		t.Errorf("image without a pin: %q", got)
	}
	if got := imageToolBundleProblem(t.TempDir(), nil); got != "" {
		t.Errorf("no report: %q", got)
	}
}
