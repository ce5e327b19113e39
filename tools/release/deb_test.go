package release

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/deploy/systemd"
)

// TestDebPackageContents packs the release from the binaries
// TestVersionFlag built, unpacks each .deb into a scratch root with
// dpkg-deb and checks its control fields, conffiles, maintainer scripts
// and files: the binaries run, the units, user and configuration are the
// ones deploy/systemd ships, the man pages and completions are there.
func TestDebPackageContents(t *testing.T) {
	bins := builtBinaries(t)
	root := repoRoot(t)
	version, err := DebVersion(t.Context(), root)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	debs, err := Build(t.Context(), Options{Root: root, Out: t.TempDir(), BinDir: bins, Version: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("packed %d packages in %s", len(debs), time.Since(start).Round(time.Millisecond))
	if len(debs) != 2 {
		t.Fatalf("packages: %q, want %s and %s", debs, ProvisionerPackage, BuildPackage)
	}
	t.Run(ProvisionerPackage, func(t *testing.T) { checkProvisionerDeb(t, debs[0], version) })
	t.Run(BuildPackage, func(t *testing.T) { checkBuildDeb(t, debs[1], version) })
}

func checkProvisionerDeb(t *testing.T, deb, version string) {
	dir := unpack(t, deb, ProvisionerPackage, version)
	if got := dpkgDeb(t, "--info", deb, "conffiles"); strings.TrimSpace(got) != ConfigPath {
		t.Errorf("conffiles: %q, want %s", got, ConfigPath)
	}
	if got := dpkgDeb(t, "--info", deb, "postinst"); !strings.Contains(got, "systemd-sysusers /usr/lib/sysusers.d/cure.conf") || !strings.Contains(got, "daemon-reload") {
		t.Errorf("postinst lacks systemd-sysusers or daemon-reload:\n%s", got)
	}
	for _, s := range []string{"prerm", "postrm"} {
		if got := dpkgDeb(t, "--info", deb, s); !strings.HasPrefix(got, "#!/bin/sh") {
			t.Errorf("%s: %q", s, got)
		}
	}
	for _, b := range []string{"provisioner-lite", "curectl"} {
		checkBinary(t, dir, b)
	}
	for path, want := range map[string][]byte{
		UnitDir + "/provisioner-lite.service": systemd.Service,
		UnitDir + "/provisioner-lite.socket":  systemd.Socket,
		SysusersPath:                          systemd.Sysusers,
		ConfigPath:                            systemd.Config,
	} {
		if got, err := os.ReadFile(filepath.Join(dir, path)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: not deploy/systemd's (%v)", path, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "etc/cure/manifests")); err != nil || !fi.IsDir() {
		t.Errorf("/etc/cure/manifests: %v", err)
	}
	for _, prog := range Documented {
		checkManPage(t, filepath.Join(dir, ManDir, prog+".1.gz"), prog)
		for _, sh := range Shells {
			p := filepath.Join(dir, sh.Dir, sh.File(prog))
			if b, err := os.ReadFile(p); err != nil || !bytes.Contains(b, []byte(prog)) {
				t.Errorf("%s completion %s: %v (%d bytes)", sh.Shell, p, err, len(b))
			}
		}
	}
	// curectl's subcommands have pages of their own.
	if _, err := os.Stat(filepath.Join(dir, ManDir, "curectl-provision.1.gz")); err != nil {
		t.Errorf("curectl-provision.1.gz: %v", err)
	}
}

func checkBuildDeb(t *testing.T, deb, version string) {
	dir := unpack(t, deb, BuildPackage, version)
	checkBinary(t, dir, "cure-build")
	for _, p := range []string{"initramfs/cure.yaml", "initramfs/toolbundle.yaml", "src/go.mod", "src/initramfs/cure.yaml", "src/runner/cmd/cure-runner/main.go"} {
		if fi, err := os.Stat(filepath.Join(dir, ShareDir, p)); err != nil || fi.Size() == 0 {
			t.Errorf("%s/%s: %v", ShareDir, p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ShareDir, "src/out")); err == nil {
		t.Errorf("%s/src/out: build outputs packed (only the committed tree belongs)", ShareDir)
	}
}

// unpack extracts deb into a scratch root and checks its control fields.
func unpack(t *testing.T, deb, name, version string) string {
	t.Helper()
	for field, want := range map[string]string{"Package": name, "Version": version, "Architecture": "amd64", "Section": "admin"} {
		if got := strings.TrimSpace(dpkgDeb(t, "--field", deb, field)); got != want {
			t.Errorf("%s: control %s %q, want %q", filepath.Base(deb), field, got, want)
		}
	}
	dir := t.TempDir()
	dpkgDeb(t, "-x", deb, dir)
	return dir
}

func checkBinary(t *testing.T, root, name string) {
	t.Helper()
	p := filepath.Join(root, "usr/bin", name)
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("/usr/bin/%s: not an executable (%v)", name, err)
		return
	}
	out, err := exec.Command(p, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), name+" ") {
		t.Errorf("/usr/bin/%s --version: %q, %v", name, out, err)
	}
}

func checkManPage(t *testing.T, path, prog string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Errorf("man page: %v", err)
		return
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	b, err := io.ReadAll(zr)
	if err != nil || !bytes.Contains(b, []byte(".TH")) || !bytes.Contains(b, []byte(prog)) {
		t.Errorf("%s: not a troff page of %s (%v)", path, prog, err)
	}
}

func dpkgDeb(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("dpkg-deb", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
