package release

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"

	"github.com/cure-oss/cure/deploy/systemd"
)

//go:embed scripts/provisioner-postinst.sh
var provisionerPostinst []byte

//go:embed scripts/provisioner-prerm.sh
var provisionerPrerm []byte

//go:embed scripts/provisioner-postrm.sh
var provisionerPostrm []byte

// Package names, as apt knows them.
const (
	ProvisionerPackage = "cure-provisioner"
	BuildPackage       = "cure-build"
)

// Installed paths pinned for the site (docs/OPERATIONS.md, "Install").
const (
	ConfigPath   = "/etc/cure/provisioner-lite.yaml"
	UnitDir      = "/lib/systemd/system"
	SysusersPath = "/usr/lib/sysusers.d/cure.conf"
	ManDir       = "/usr/share/man/man1"
	ShareDir     = "/usr/share/cure"
)

// staged is what the build made for the packages: binaries, generated docs,
// the module source the image is built from, and scratch for scripts.
type staged struct {
	bin, docs, src, scratch string
}

func common(name, version, description string) *nfpm.Info {
	return &nfpm.Info{
		Name:          name,
		Arch:          "amd64",
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none", // already a Debian version (DebVersion)
		Section:       "admin",
		Priority:      "optional",
		Maintainer:    "CURE developers <cure@cure-oss.invalid>",
		Homepage:      "https://github.com/cure-oss/cure",
		License:       "Apache-2.0",
		Description:   description,
		// Fixed times: the same checkout packs the same bytes.
		MTime: time.Unix(0, 0).UTC(),
		// zstd (dpkg reads it since Debian 12): gzip -9 of the binaries took
		// most of the packing time.
		Overridables: nfpm.Overridables{Deb: nfpm.Deb{Compression: "zstd"}},
	}
}

func file(src, dst string, mode os.FileMode) *files.Content {
	return &files.Content{Source: src, Destination: dst, FileInfo: &files.ContentFileInfo{Mode: mode, MTime: time.Unix(0, 0).UTC()}}
}

// provisionerInfo is cure-provisioner: the coordinator and curectl, their
// units, user, configuration, man pages and completions.
func provisionerInfo(st staged, version string) (*nfpm.Info, error) {
	info := common(ProvisionerPackage, version,
		"CURE coordinator (provisioner-lite) and its operator CLI (curectl)\n"+
			" Provisions, validates and burns in bare-metal servers over Redfish and network boot.")
	info.Recommends = []string{"ipxe"}
	info.Suggests = []string{"postgresql"}
	c := files.Contents{
		file(filepath.Join(st.bin, "provisioner-lite"), "/usr/bin/provisioner-lite", 0o755),
		file(filepath.Join(st.bin, "curectl"), "/usr/bin/curectl", 0o755),
		{Destination: "/etc/cure/manifests", Type: files.TypeDir, FileInfo: &files.ContentFileInfo{Mode: 0o755}},
	}
	generated := map[string][]byte{
		UnitDir + "/provisioner-lite.service": systemd.Service,
		UnitDir + "/provisioner-lite.socket":  systemd.Socket,
		SysusersPath:                          systemd.Sysusers,
		ConfigPath:                            systemd.Config,
	}
	for _, dst := range sortedKeys(generated) {
		src, err := writeScratch(st.scratch, dst, generated[dst])
		if err != nil {
			return nil, err
		}
		ct := file(src, dst, 0o644)
		if dst == ConfigPath {
			ct.Type = files.TypeConfigNoReplace // a conffile: dpkg keeps the site's edits
		}
		c = append(c, ct)
	}
	docs, err := docContents(st.docs)
	if err != nil {
		return nil, err
	}
	info.Contents = append(c, docs...)
	for i, s := range []struct {
		name string
		body []byte
		dst  *string
	}{{"postinst", provisionerPostinst, &info.Scripts.PostInstall}, {"prerm", provisionerPrerm, &info.Scripts.PreRemove}, {"postrm", provisionerPostrm, &info.Scripts.PostRemove}} {
		p, err := writeScratch(st.scratch, fmt.Sprintf("scripts/%d-%s", i, s.name), s.body)
		if err != nil {
			return nil, err
		}
		*s.dst = p
	}
	return info, nil
}

// docContents are the generated man pages and completions.
func docContents(dir string) (files.Contents, error) {
	var c files.Contents
	pages, err := filepath.Glob(filepath.Join(dir, "man", "*.1.gz"))
	if err != nil || len(pages) == 0 {
		return nil, fmt.Errorf("no man pages in %s", filepath.Join(dir, "man"))
	}
	for _, p := range pages {
		c = append(c, file(p, ManDir+"/"+filepath.Base(p), 0o644))
	}
	for _, prog := range Documented {
		for _, sh := range Shells {
			c = append(c, file(filepath.Join(dir, sh.Shell, sh.File(prog)), sh.Dir+"/"+sh.File(prog), 0o644))
		}
	}
	return c, nil
}

// buildInfo is cure-build: the image builder with what `make image` reads
// besides the kernel: the specs and the module source its busybox and the
// runner are compiled from (cure-build compiles them with Go).
func buildInfo(st staged, version string) *nfpm.Info {
	info := common(BuildPackage, version,
		"CURE image builder (cure-build) and the CURE image's inputs\n"+
			" Builds the in-RAM CURE image a coordinator serves, from the specs and the\n"+
			" module source in "+ShareDir+" (needs Go and the kernel package's modules).")
	info.Recommends = []string{"zstd", "lz4", "cpio"}
	info.Contents = files.Contents{
		file(filepath.Join(st.bin, "cure-build"), "/usr/bin/cure-build", 0o755),
		file(filepath.Join(st.src, "initramfs", "cure.yaml"), ShareDir+"/initramfs/cure.yaml", 0o644),
		file(filepath.Join(st.src, "initramfs", "toolbundle.yaml"), ShareDir+"/initramfs/toolbundle.yaml", 0o644),
		{Source: st.src, Destination: ShareDir + "/src", Type: files.TypeTree},
	}
	return info
}

// pack writes info as a .deb into dir and returns its path.
func pack(info *nfpm.Info, dir string) (string, error) {
	pkger, err := nfpm.Get("deb")
	if err != nil {
		return "", fmt.Errorf("nfpm: %w", err)
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.Validate(info); err != nil {
		return "", fmt.Errorf("package %s: %w", info.Name, err)
	}
	path := filepath.Join(dir, pkger.ConventionalFileName(info))
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("package %s: %w", info.Name, err)
	}
	if err := pkger.Package(info, f); err != nil {
		f.Close()
		return "", fmt.Errorf("package %s: %w", info.Name, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("package %s: %w", info.Name, err)
	}
	return path, nil
}

func writeScratch(dir, name string, body []byte) (string, error) {
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", fmt.Errorf("staging %s: %w", name, err)
	}
	if err := os.WriteFile(p, body, 0o644); err != nil {
		return "", fmt.Errorf("staging %s: %w", name, err)
	}
	return p, nil
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
