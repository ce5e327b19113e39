package spec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const good = `# test spec
init: github.com/u-root/u-root/cmds/core/init
uinit: github.com/cure-oss/cure/runner/cmd/cure-runner
shell: github.com/u-root/u-root/cmds/core/gosh
commands:
  - github.com/u-root/u-root/cmds/core/gosh
  - github.com/u-root/u-root/cmds/core/ls
modules: [nvme, virtio-net]
tools: [/usr/sbin/nvme]
files:
  - overlay/motd:/etc/motd
ca_path: /etc/cure/ca.pem
cmdline: console=ttyS0
`

func TestParseGood(t *testing.T) {
	s, err := Parse("/x/initramfs/cure.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if s.Uinit.Value != "github.com/cure-oss/cure/runner/cmd/cure-runner" || s.Uinit.Line != 3 {
		t.Errorf("uinit = %+v", s.Uinit)
	}
	if got := strings.Join(Values(s.Modules), ","); got != "nvme,virtio-net" {
		t.Errorf("modules = %s", got)
	}
	f := s.ResolvedFiles()
	if len(f) != 1 || f[0].Src != "/x/initramfs/overlay/motd" || f[0].Dst != "etc/motd" {
		t.Errorf("files = %+v", f)
	}
}

func TestParseErrorsNameFileAndLine(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown field", "init: a/b\nmodlues: [x]\n", "spec.yaml:2: field modlues not found"},
		{"wrong type", "init: a/b\nmodules: nvme\n", "spec.yaml:2: "},
		{"missing init", "uinit: a/b\n", "spec.yaml: init: required"},
		{"syntax", "init: [a\n", "spec.yaml:"},
		{"bad import", "init: a/b\ncommands:\n  - ls\n", "spec.yaml:3: commands[0]: \"ls\" is not a Go import path"},
		{"dup command", "init: a/b\ncommands:\n  - a/c\n  - a/c\n", "spec.yaml:4: commands[1]: \"a/c\" already listed at line 3"},
		{"dup module dash", "init: a/b\nmodules:\n  - nvme_core\n  - nvme-core\n", "spec.yaml:4: modules[1]"},
		{"bad module", "init: a/b\nmodules:\n  - nvme.ko\n", "spec.yaml:3: modules[0]: \"nvme.ko\""},
		{"relative tool", "init: a/b\ntools: [usr/sbin/nvme]\n", "spec.yaml:2: tools[0]"},
		{"file no dst", "init: a/b\nfiles: [foo]\n", "spec.yaml:2: files[0]: \"foo\": expected \"src:dst\""},
		{"file rel dst", "init: a/b\nfiles: [\"foo:etc/foo\"]\n", "must be absolute"},
		{"shell not listed", "init: a/b\nshell: a/sh\n", "spec.yaml:2: shell"},
		{"bad build tag", "init: a/b\nbuild_tags: [\"-s -w\"]\n", "spec.yaml:2: build_tags[0]: \"-s -w\" is not a Go build tag"},
		{"dup build tag", "init: a/b\nbuild_tags:\n  - grpcnotrace\n  - grpcnotrace\n", "spec.yaml:4: build_tags[1]: \"grpcnotrace\" already listed at line 3"},
		{"ca relative", "init: a/b\nca_path: etc/ca.pem\n", "spec.yaml:2: ca_path"},
		{"tool bundle pin relative", "init: a/b\ntool_bundle_path: etc/cure/toolbundle.json\n", "spec.yaml:2: tool_bundle_path"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("spec.yaml", []byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// TestRepoSpecsParse keeps the checked-in specs valid.
func TestRepoSpecsParse(t *testing.T) {
	for _, f := range []string{"../../initramfs/cure.yaml", "../../qemu-test/hostos/hostos.yaml"} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if _, err := Load(filepath.Clean(f)); err != nil {
			t.Errorf("%v", err)
		}
	}
}

func TestPCIIDs(t *testing.T) {
	s, err := Parse("s.yaml", []byte(good+"pci_ids:\n  src: /usr/share/misc/pci.ids\n  vendors: [\"10de\", \"15b3\"]\n"))
	if err != nil || s.PCIIDs == nil || s.PCIIDs.Src.Value != "/usr/share/misc/pci.ids" || len(s.PCIIDs.Vendors) != 2 {
		t.Fatalf("spec %+v, err %v", s.PCIIDs, err)
	}
	_, err = Parse("s.yaml", []byte(good+"pci_ids:\n  src: pci.ids\n  vendors: [\"10DE\", \"15b3\", \"15b3\"]\n"))
	for _, want := range []string{"s.yaml:15: pci_ids.src", "s.yaml:16: pci_ids.vendors[0]: \"10DE\"", "pci_ids.vendors[2]: \"15b3\" already listed"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
}

func TestSpecForArch(t *testing.T) {
	s, err := Parse("a.yaml", []byte(`init: github.com/u-root/u-root/cmds/core/init
modules: [nvme, virtio_mmio]
tools: [/usr/bin/zstd]
cmdline: console=ttyS0
arch:
  arm64:
    cmdline: console=ttyAMA0
    tools: []
    optional_modules: [virtio-mmio]
`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.ForArch("arm64")
	if err != nil || a.Cmdline.Value != "console=ttyAMA0" || len(a.Tools) != 0 || len(a.Modules) != 2 {
		t.Fatalf("arm64: %+v, %v", a, err)
	}
	if x, err := s.ForArch("amd64"); err != nil || x.Cmdline.Value != "console=ttyS0" || len(x.Tools) != 1 {
		t.Fatalf("amd64: %+v, %v", x, err)
	}
	if len(s.OptionalModules("arm64")) != 1 || s.OptionalModules("amd64") != nil {
		t.Errorf("optional modules: %v / %v", s.OptionalModules("arm64"), s.OptionalModules("amd64"))
	}
	if _, err := s.ForArch("riscv64"); err == nil || !strings.Contains(err.Error(), `"riscv64": want one of amd64, arm64`) {
		t.Errorf("riscv64: %v", err)
	}
	for body, want := range map[string]string{
		"arch:\n  mips: {}\n":                            `a.yaml: arch: "mips" is not an architecture`,
		"arch:\n  arm64:\n    tools: [zstd]\n":           `a.yaml:5: arch.arm64.tools[0]: "zstd" must be an absolute host path`,
		"arch:\n  arm64:\n    optional_modules: [ice]\n": `a.yaml:5: arch.arm64.optional_modules[0]: "ice" is not one of the spec's modules`,
		"arch:\n  arm64:\n    cmdline: [a]\n":            "a.yaml:5: expected a string",
		"arch:\n  arm64:\n    kernel: /boot/vmlinuz\n":   "a.yaml:5: field kernel not found",
	} {
		_, err := Parse("a.yaml", []byte("init: github.com/u-root/u-root/cmds/core/init\nmodules: [nvme]\n"+body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", body, err, want)
		}
	}
}
