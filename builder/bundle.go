package builder

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/cure-oss/cure/builder/driverbundle"
	"github.com/cure-oss/cure/builder/kmod"
	"github.com/cure-oss/cure/tools/gpu/driver"
	"github.com/u-root/mkuimage/cpio"
)

// openBundle opens a driver bundle and refuses it unless every module was
// built for kernel k (the tree's own vermagic); its modules join the index
// so their kernel dependencies (drm, ...) come along.
func openBundle(src string, k Kernel, ix *kmod.Index) (*driverbundle.Bundle, error) {
	b, err := driverbundle.Open(src, "")
	if err != nil {
		return nil, err
	}
	want, err := ix.Vermagic()
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("--driver-bundle %s: the kernel's vermagic: %w", src, err)
	}
	if err := b.CheckVermagic(k.Version, want); err != nil {
		b.Close()
		return nil, fmt.Errorf("--driver-bundle %s refused:\n%w", src, err)
	}
	for _, m := range b.Modules {
		if err := ix.Add(m); err != nil {
			b.Close()
			return nil, fmt.Errorf("--driver-bundle %s: %w", src, err)
		}
	}
	return b, nil
}

// bundleRecords are the bundle's files (modules come with the kernel's)
// and the manifest the runner reads, with the modules in load order.
func bundleRecords(b *driverbundle.Bundle, mods []*kmod.Module) (*DriverBundleReport, []cpio.Record, error) {
	var order []string
	for _, m := range mods {
		if m.Src != "" {
			order = append(order, m.Name)
		}
	}
	var recs []cpio.Record
	for _, f := range b.Files {
		if f.Link != "" {
			recs = append(recs, cpio.Symlink(f.Dst, f.Link))
			continue
		}
		r, err := hostFileRecord(f.Src, f.Dst)
		if err != nil {
			return nil, nil, fmt.Errorf("--driver-bundle %s: %w", b.Source, err)
		}
		recs = append(recs, r)
	}
	m := b.Manifest(order)
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	recs = append(recs, fileRecord(driver.ManifestPath, append(data, '\n'), 0o644))
	return &DriverBundleReport{
		Source: filepath.Base(b.Source), Version: b.Version, Modules: order,
		Files: len(b.Files) + len(b.Modules), Bytes: b.Bytes, FabricManager: m.FabricManager != "", Tools: m.Tools,
	}, recs, nil
}

// checkBundleLibraries refuses an image in which a bundle program or
// library cannot find a shared library it needs: better at build time
// than an nvidia-smi that will not start on the node.
func checkBundleLibraries(b *driverbundle.Bundle, archive []byte) error {
	present := map[string]bool{}
	rr := cpio.Newc.Reader(bytes.NewReader(archive))
	err := cpio.ForEachRecord(rr, func(r cpio.Record) error {
		present[path.Clean(r.Name)] = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing initramfs: %w", err)
	}
	// Debian's merged /usr: /lib is /usr/lib.
	for p := range present {
		if rest, ok := strings.CutPrefix(p, "usr/lib/"); ok {
			present["lib/"+rest] = true
		} else if rest, ok := strings.CutPrefix(p, "lib/"); ok {
			present["usr/lib/"+rest] = true
		}
	}
	if missing := b.MissingLibraries(present); len(missing) > 0 {
		return fmt.Errorf("--driver-bundle %s: shared libraries missing from the image (add them to the bundle's lib/ or the spec's tools):\n%s",
			b.Source, joinLines(missing))
	}
	return nil
}

func joinLines(ls []string) string { return "  " + strings.Join(ls, "\n  ") }
