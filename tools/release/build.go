package release

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// BuildOptions are how BuildBinaries builds.
type BuildOptions struct {
	// Version is linked into tools/version when set (the package version).
	Version string
	// Trimpath drops the build machine's paths (a release); the tests leave
	// it off so the build shares the cache `go test` filled.
	Trimpath bool
}

// BuildBinaries builds bins from the module at root into dir in one go
// build (the packages compile once, in parallel), cgo off as in the image.
func BuildBinaries(ctx context.Context, root, dir string, bins []Binary, o BuildOptions) error {
	// -buildvcs=true: the revision is the point of --version, whatever
	// GOFLAGS says (a CI may set -buildvcs=false).
	args := []string{"build", "-buildvcs=true", "-o", dir + string(os.PathSeparator)}
	if o.Trimpath {
		args = append(args, "-trimpath")
	}
	// -s -w: no symbol table or DWARF (a third of the link's time, and of
	// the packages' size); the build info --version reads stays.
	ldflags := "-s -w"
	if o.Version != "" {
		ldflags += " -X github.com/cure-oss/cure/tools/version.linked=" + o.Version
	}
	args = append(args, "-ldflags="+ldflags)
	for _, b := range bins {
		args = append(args, b.Pkg)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return nil
}
