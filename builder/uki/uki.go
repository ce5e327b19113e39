// Package uki builds CURE as a signed unified kernel image: systemd-stub
// (systemd-boot-efi's linuxx64.efi.stub) with the kernel, initramfs,
// command line and os-release as PE sections at fixed addresses (objcopy),
// the PE timestamp pinned, signed for UEFI Secure Boot with sbsign at a
// fixed signing time, so the same inputs give the same bytes. It also
// computes what report.json records of it: the digests and the PCR values
// a correct boot produces.
package uki

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/cure-oss/cure/api/imagereport"
	"github.com/cure-oss/cure/tools/uefi"
)

// DefaultStub is systemd-boot-efi's x86-64 stub.
const DefaultStub = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"

// Section addresses relative to the stub's ImageBase 0: the layout systemd
// documents for objcopy-built images. The stub ends below osrelVMA; the
// kernel must fit below initrdVMA.
const (
	osrelVMA   = 0x20000
	cmdlineVMA = 0x30000
	linuxVMA   = 0x2000000
	initrdVMA  = 0x3000000
	// MaxKernel is the largest kernel the layout holds.
	MaxKernel = initrdVMA - linuxVMA
)

// Options are a UKI's inputs.
type Options struct {
	Stub      string // default DefaultStub
	Kernel    string // vmlinuz
	Initrd    string // the initramfs, compressed as the kernel unpacks it
	Cmdline   string // fixed kernel command line, part of the signed image
	OSRelease string // os-release text
	Key, Cert string // Secure Boot signing key and certificate (PEM; RSA, as sbsign wants)
	// Epoch is the PE timestamp and the signing time (SOURCE_DATE_EPOCH).
	Epoch int64
	Out   string // the signed image
	Work  string // scratch directory (default: a temporary one)
}

// Runner runs a program (exec in production).
type Runner func(ctx context.Context, env []string, name string, args ...string) error

// Exec runs name with args and env added to the environment.
func Exec(ctx context.Context, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, bytes.TrimSpace(out))
	}
	return nil
}

// Tools are the host programs Build needs (Debian packages in parentheses
// for the error).
var Tools = map[string]string{"objcopy": "binutils", "sbsign": "sbsigntool", "faketime": "faketime"}

// CheckTools names the first missing program.
func CheckTools() error {
	for _, t := range []string{"objcopy", "sbsign", "faketime"} {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("building the signed image needs %s (apt install %s; scripts/install-deps.sh)", t, Tools[t])
		}
	}
	return nil
}

// Build makes the signed UKI at o.Out and describes it.
func Build(ctx context.Context, o Options, run Runner) (imagereport.UKI, error) {
	var rep imagereport.UKI
	if o.Stub == "" {
		o.Stub = DefaultStub
	}
	if run == nil {
		run = Exec
	}
	for _, f := range []struct{ what, path string }{{"EFI stub (systemd-boot-efi)", o.Stub}, {"kernel", o.Kernel}, {"initramfs", o.Initrd},
		{"Secure Boot key", o.Key}, {"Secure Boot certificate", o.Cert}} {
		if f.path == "" {
			return rep, fmt.Errorf("uki: %s: no file given", f.what)
		}
		if _, err := os.Stat(f.path); err != nil {
			return rep, fmt.Errorf("uki: %s: %w", f.what, err)
		}
	}
	if st, _ := os.Stat(o.Kernel); st.Size() > MaxKernel {
		return rep, fmt.Errorf("uki: kernel %s is %d bytes; the section layout holds %d", o.Kernel, st.Size(), MaxKernel)
	}
	certDER, err := readCert(o.Cert)
	if err != nil {
		return rep, err
	}
	work := o.Work
	if work == "" {
		if work, err = os.MkdirTemp("", "uki-"); err != nil {
			return rep, err
		}
		defer os.RemoveAll(work)
	}
	osrel, cmdline, unsigned := filepath.Join(work, "osrel"), filepath.Join(work, "cmdline"), filepath.Join(work, "unsigned.efi")
	if err := os.WriteFile(osrel, []byte(o.OSRelease), 0o644); err != nil {
		return rep, err
	}
	if err := os.WriteFile(cmdline, []byte(o.Cmdline), 0o644); err != nil {
		return rep, err
	}
	env := []string{fmt.Sprintf("SOURCE_DATE_EPOCH=%d", o.Epoch), "TZ=UTC"}
	if err := run(ctx, env, "objcopy", ObjcopyArgs(o.Stub, osrel, cmdline, o.Kernel, o.Initrd, unsigned)...); err != nil {
		return rep, fmt.Errorf("uki: %w", err)
	}
	if err := uefi.PinPETimestamp(unsigned, uint32(o.Epoch)); err != nil {
		return rep, fmt.Errorf("uki: %w", err)
	}
	// sbsign's PKCS#7 carries a signingTime attribute from the clock: a
	// clock frozen at Epoch makes the signature the same bytes each time
	// (RSA PKCS#1 v1.5 signatures are deterministic). -f with a bare
	// timestamp freezes libfaketime's clock; without it the clock starts
	// there and runs, and hashing a large image crosses a second.
	tmp := o.Out + ".tmp"
	stamp := time.Unix(o.Epoch, 0).UTC().Format("2006-01-02 15:04:05")
	if err := run(ctx, env, "faketime", "-f", stamp, "sbsign", "--key", o.Key, "--cert", o.Cert, "--output", tmp, unsigned); err != nil {
		os.Remove(tmp)
		return rep, fmt.Errorf("uki: signing: %w", err)
	}
	if err := os.Rename(tmp, o.Out); err != nil {
		return rep, err
	}
	return Describe(o.Out, certDER)
}

// Describe computes report.json's record of the signed image at path.
func Describe(path string, signerDER []byte) (imagereport.UKI, error) {
	var rep imagereport.UKI
	b, err := os.ReadFile(path)
	if err != nil {
		return rep, err
	}
	ah, err := AuthenticodeSHA256(b)
	if err != nil {
		return rep, fmt.Errorf("uki %s: %w", path, err)
	}
	pcrs, err := PredictPCRs(b)
	if err != nil {
		return rep, fmt.Errorf("uki %s: %w", path, err)
	}
	sum := sha256.Sum256(b)
	signer := sha256.Sum256(signerDER)
	return imagereport.UKI{File: filepath.Base(path), SHA256: hex.EncodeToString(sum[:]), AuthenticodeSHA256: hex.EncodeToString(ah),
		SignerSHA256: hex.EncodeToString(signer[:]), PCRs: pcrs}, nil
}

// readCert is the DER of the PEM certificate at path.
func readCert(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("uki: Secure Boot certificate %s: no PEM CERTIFICATE block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("uki: Secure Boot certificate %s: %w", path, err)
	}
	if c.PublicKeyAlgorithm != x509.RSA {
		return nil, fmt.Errorf("uki: Secure Boot certificate %s: key is %s; UEFI Secure Boot (and sbsign) want RSA", path, c.PublicKeyAlgorithm)
	}
	return blk.Bytes, nil
}

// ObjcopyArgs is the objcopy command line that builds the unsigned UKI.
func ObjcopyArgs(stub, osrel, cmdline, kernel, initrd, out string) []string {
	sec := func(name, file string, vma int) []string {
		return []string{"--add-section", name + "=" + file, "--change-section-vma", fmt.Sprintf("%s=%#x", name, vma)}
	}
	var a []string
	a = append(a, sec(".osrel", osrel, osrelVMA)...)
	a = append(a, sec(".cmdline", cmdline, cmdlineVMA)...)
	a = append(a, sec(".linux", kernel, linuxVMA)...)
	a = append(a, sec(".initrd", initrd, initrdVMA)...)
	return append(a, stub, out)
}
