package coordinator

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cure-oss/cure/provisioner-lite/bootserver"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/tools/toolbundle"
)

// importToolBundle checks that path is a tool bundle (its manifest reads
// and validates) and adds it to the content-addressed artifact store, from
// which nodes fetch it by sha256.
func importToolBundle(artifactDir, path string) (*pipeline.ToolBundle, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--tool-bundle: %w", err)
	}
	m, err := toolbundle.ReadManifest(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("--tool-bundle %s (build it with make toolbundle): %w", path, err)
	}
	sum, size, err := bootserver.ImportArtifact(artifactDir, path)
	if err != nil {
		return nil, fmt.Errorf("--tool-bundle: %w", err)
	}
	return &pipeline.ToolBundle{SHA256: sum, Size: size, Tools: m.Names()}, nil
}

// imageToolBundleProblem says what goes wrong in a node's debug shell when
// the image (its report.json's tool_bundle, written by cure-build) pins a
// tool bundle this coordinator does not serve: cure-tools refuses any
// other. "" when they agree, or the image pins none (an older image).
func imageToolBundleProblem(imageDir string, served *pipeline.ToolBundle) string {
	b, err := os.ReadFile(filepath.Join(imageDir, pki.ReportFile))
	if err != nil {
		return ""
	}
	var rep struct {
		ToolBundle *struct {
			SHA256 string `json:"sha256"`
			Size   int64  `json:"size"`
		} `json:"tool_bundle"`
	}
	if json.Unmarshal(b, &rep) != nil || rep.ToolBundle == nil {
		return ""
	}
	pinned := rep.ToolBundle
	switch {
	case served == nil:
		return fmt.Sprintf("the image pins tool bundle %.12s and this coordinator serves none: `cure-tools fetch` in a node's debug shell will fail; start it with --tool-bundle out/toolbundle/toolbundle.tar.zst (make toolbundle)", pinned.SHA256)
	case !strings.EqualFold(served.SHA256, pinned.SHA256) || served.Size != pinned.Size:
		return fmt.Sprintf("the image pins tool bundle %.12s (%d bytes), this coordinator serves %.12s (%d bytes): `cure-tools fetch` in a node's debug shell will refuse it; serve the bundle the image was built with, or rebuild the image (make image)",
			pinned.SHA256, pinned.Size, served.SHA256, served.Size)
	}
	return ""
}
