package builder

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/cure-oss/cure/builder/kmod"
	"github.com/cure-oss/cure/builder/spec"
)

// elfMachines maps cure-build's architectures to their ELF machine.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// KernelArch tells a kernel image's architecture from its boot header: an
// arm64 Image has "ARM\x64" at offset 56, an x86 bzImage "HdrS" at 0x202
// (the kernel's boot protocol documents, arm64 booting and x86 boot).
func KernelArch(r io.ReaderAt) (string, error) {
	head := make([]byte, 0x206)
	if n, err := r.ReadAt(head, 0); n < len(head) {
		return "", fmt.Errorf("kernel image too short (%d bytes): %w", n, err)
	}
	switch {
	case bytes.Equal(head[56:60], []byte("ARM\x64")):
		return "arm64", nil
	case bytes.Equal(head[0x202:0x206], []byte("HdrS")):
		return "amd64", nil
	}
	return "", errors.New("kernel image is neither an arm64 Image nor an x86 bzImage")
}

// checkKernelArch refuses a kernel of another architecture than arch: an
// arm64 image with x86 modules would build and never boot.
func checkKernelArch(vmlinuz, arch string) error {
	f, err := os.Open(vmlinuz)
	if err != nil {
		return err
	}
	defer f.Close()
	got, err := KernelArch(f)
	if err != nil {
		return fmt.Errorf("%s: %w", vmlinuz, err)
	}
	if got != arch {
		hint := "install-deps.sh image"
		if arch == "arm64" {
			hint = "make image-arm64 fetches it into .cache/kernel-arm64/root"
		}
		return fmt.Errorf("%s is an %s kernel, the image is for %s (%s)", vmlinuz, got, arch, hint)
	}
	return nil
}

// checkToolArch refuses an ELF tool built for another machine than arch
// (a host zstd in an arm64 image). Non-ELF files (data, scripts) pass.
func checkToolArch(tools []string, arch string) error {
	want := elfMachines[arch]
	for _, t := range tools {
		src, _, _ := strings.Cut(t, ":")
		f, err := elf.Open(src)
		if err != nil {
			continue // not ELF
		}
		m := f.Machine
		f.Close()
		if m != want {
			return fmt.Errorf("tool %s is %s code, the image is for %s (%s): give that architecture's build, or leave it out with the spec's arch.%s.tools",
				src, m, arch, want, arch)
		}
	}
	return nil
}

// presentModules lists the spec's modules to resolve for arch: every
// module, less the arch's optional ones its kernel lacks (returned second,
// for report.json). A required module that is missing is left in, so the
// closure fails naming it.
func presentModules(s *spec.Spec, arch string, ix *kmod.Index) (want, missing []string) {
	optional := map[string]bool{}
	for _, m := range s.OptionalModules(arch) {
		optional[kmod.CanonicalName(m.Value)] = true
	}
	for _, m := range s.Modules {
		n := kmod.CanonicalName(m.Value)
		if optional[n] && ix.Modules[n] == nil && !ix.Builtin[n] {
			missing = append(missing, m.Value)
			continue
		}
		want = append(want, m.Value)
	}
	return want, missing
}

// archOmissions says what an image of another architecture than amd64
// leaves out (report.json's omitted): cure-nvml, unless given as a
// --tool, and the tool bundle pin when the spec's arch entry drops it.
func archOmissions(s *spec.Spec, arch string, tools []string) []string {
	if arch == "amd64" {
		return nil
	}
	var out []string
	if !slices.ContainsFunc(tools, func(t string) bool { return strings.HasSuffix(t, "usr/bin/cure-nvml") }) {
		out = append(out, "cure-nvml: NVML's Go bindings need cgo and no "+arch+" C toolchain is in the build role; gpu checks report SKIP")
	}
	if s.ToolBundlePath.Value == "" {
		out = append(out, "tool bundle pin: the tool bundle holds x86-64 builds; cure-tools and suites needing fio, stress-ng or iperf3 say so")
	}
	return out
}
