package main

import (
	"fmt"
	"os"

	"github.com/cure-oss/cure/provisioner-lite/bootserver"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
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
