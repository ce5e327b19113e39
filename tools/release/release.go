package release

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/goreleaser/nfpm/v2"
)

// Packaged are the binaries the .deb packages carry.
var Packaged = []string{"provisioner-lite", "curectl", "cure-build"}

// Options are one release build's.
type Options struct {
	Root    string // the module's checkout
	Out     string // where the .deb files go (out/release)
	Version string // the package version; "" is DebVersion of Root
	// BinDir holds Packaged already built (the tests reuse their build);
	// "" builds them with -trimpath and the version linked in.
	BinDir string
	Log    *slog.Logger
}

// Build makes the release's .deb packages and returns their paths.
func Build(ctx context.Context, o Options) ([]string, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Version == "" {
		v, err := DebVersion(ctx, o.Root)
		if err != nil {
			return nil, err
		}
		o.Version = v
	}
	work, err := os.MkdirTemp("", "cure-release-")
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	defer os.RemoveAll(work)
	st := staged{bin: o.BinDir, docs: filepath.Join(work, "docs"), src: filepath.Join(work, "src"), scratch: filepath.Join(work, "scratch")}
	if err := stage(ctx, o, &st); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	prov, err := provisionerInfo(st, o.Version)
	if err != nil {
		return nil, err
	}
	var debs []string
	for _, info := range []*nfpm.Info{prov, buildInfo(st, o.Version)} {
		start := time.Now()
		p, err := pack(info, o.Out)
		if err != nil {
			return nil, err
		}
		o.Log.Info("packed", "package", info.Name, "version", o.Version, "file", p, "took", time.Since(start).Round(time.Millisecond))
		debs = append(debs, p)
	}
	return debs, nil
}

// stage builds the binaries (unless given), generates their docs and
// exports the module source.
func stage(ctx context.Context, o Options, st *staged) error {
	if st.bin == "" {
		st.bin = filepath.Join(filepath.Dir(st.docs), "bin")
		var bins []Binary
		for _, b := range Binaries {
			if slices.Contains(Packaged, b.Name) {
				bins = append(bins, b)
			}
		}
		start := time.Now()
		if err := BuildBinaries(ctx, o.Root, st.bin, bins, BuildOptions{Version: o.Version, Trimpath: true}); err != nil {
			return err
		}
		o.Log.Info("built", "binaries", Packaged, "version", o.Version, "took", time.Since(start).Round(time.Millisecond))
	}
	if err := genDocs(ctx, st.bin, st.docs); err != nil {
		return fmt.Errorf("release: man pages and completions: %w", err)
	}
	return exportSource(ctx, o.Root, st.src)
}

// exportSource writes the committed tree of HEAD to dir (git archive):
// what cure-build compiles the image from, without the checkout's
// uncommitted files or build outputs.
func exportSource(ctx context.Context, root, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("release: source: %w", err)
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive --format=tar HEAD | tar -x -C "$2"`, "sh", root, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("release: git archive HEAD into %s: %w: %s", dir, err, out)
	}
	return nil
}
