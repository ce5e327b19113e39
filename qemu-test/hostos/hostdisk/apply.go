package hostdisk

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/pe"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/cure-oss/cure/tools/uefi"
)

// Runner runs an external command (mkfs.vfat, mcopy, syslinux); tests can
// record calls.
type Runner func(ctx context.Context, env []string, name string, args ...string) error

// ExecRunner runs commands with os/exec, reporting stderr on failure.
func ExecRunner(ctx context.Context, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %v: %w: %s", name, args, err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// Epoch is the fixed timestamp (2024-01-01T00:00:00Z) of every file on the
// disk; FAT cannot store times before 1980.
const Epoch = 1704067200

// MBRBootCode is Debian's syslinux MBR.
const MBRBootCode = "/usr/lib/syslinux/mbr/mbr.bin"

// Output names written by Assemble.
const (
	RawName  = "disk.raw"
	ZstName  = "disk.raw.zst"
	GzName   = "disk.raw.gz"
	JSONName = "disk.json"
)

// Artifact describes one output file in disk.json.
type Artifact struct {
	Name   string `json:"name"`
	Format string `json:"format"` // raw, zst, gz
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// PartitionInfo lets tests and tools find partitions without parsing the MBR.
type PartitionInfo struct {
	Number int    `json:"number"`
	Label  string `json:"label"`
	Offset int64  `json:"offset"`
	Size   int64  `json:"size"`
}

// Manifest is disk.json.
type Manifest struct {
	Files      []Artifact      `json:"files"`
	Partitions []PartitionInfo `json:"partitions"`
}

// Assemble executes p into outDir: disk.raw, disk.raw.zst, disk.raw.gz and
// disk.json. run executes the FAT tools.
func Assemble(ctx context.Context, p Plan, outDir string, run Runner, log *slog.Logger) (*Manifest, error) {
	if log == nil {
		log = slog.Default()
	}
	boot, err := os.ReadFile(MBRBootCode)
	if err != nil {
		return nil, fmt.Errorf("reading syslinux MBR (apt install syslinux): %w", err)
	}
	if len(boot) > 440 {
		boot = boot[:440]
	}
	mbr, err := p.MBR(boot)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(outDir, ".hostdisk-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)

	raw := filepath.Join(work, RawName)
	disk, err := os.Create(raw)
	if err != nil {
		return nil, err
	}
	defer disk.Close()
	if err := disk.Truncate(p.SizeBytes); err != nil {
		return nil, fmt.Errorf("sizing %s: %w", raw, err)
	}
	if _, err := disk.WriteAt(mbr, 0); err != nil {
		return nil, err
	}
	man := &Manifest{}
	for _, part := range p.Partitions {
		img, err := buildFAT(ctx, part, work, run)
		if err != nil {
			return nil, fmt.Errorf("partition %d (%s): %w", part.Number, part.Label, err)
		}
		if err := copyAt(disk, img, part.Offset(), part.Size()); err != nil {
			return nil, fmt.Errorf("partition %d (%s): placing filesystem: %w", part.Number, part.Label, err)
		}
		man.Partitions = append(man.Partitions, PartitionInfo{part.Number, part.Label, part.Offset(), part.Size()})
		log.Info("partition written", "number", part.Number, "label", part.Label, "offset", part.Offset(), "size", part.Size())
	}
	if err := disk.Close(); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(raw)
	if err != nil {
		return nil, err
	}
	zenc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	zst := zenc.EncodeAll(data, nil)
	zenc.Close()
	var gz bytes.Buffer
	gw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if _, err := gw.Write(data); err != nil {
		return nil, err
	}
	if err := gw.Close(); err != nil {
		return nil, err
	}
	for _, o := range []struct {
		name, format string
		data         []byte
	}{{RawName, "raw", data}, {ZstName, "zst", zst}, {GzName, "gz", gz.Bytes()}} {
		if err := os.WriteFile(filepath.Join(outDir, o.name), o.data, 0o644); err != nil {
			return nil, fmt.Errorf("writing %s: %w", o.name, err)
		}
		sum := sha256.Sum256(o.data)
		man.Files = append(man.Files, Artifact{o.name, o.format, int64(len(o.data)), hex.EncodeToString(sum[:])})
	}
	js, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(outDir, JSONName), append(js, '\n'), 0o644); err != nil {
		return nil, err
	}
	return man, nil
}

// buildFAT makes the partition's filesystem as an image file and returns
// its path.
func buildFAT(ctx context.Context, part Partition, work string, run Runner) (string, error) {
	img := filepath.Join(work, fmt.Sprintf("part%d.img", part.Number))
	f, err := os.Create(img)
	if err != nil {
		return "", err
	}
	err = f.Truncate(part.Size())
	f.Close()
	if err != nil {
		return "", err
	}
	// SOURCE_DATE_EPOCH and --invariant pin mkfs.vfat's and mtools' clocks.
	env := []string{fmt.Sprintf("SOURCE_DATE_EPOCH=%d", Epoch), "MTOOLS_SKIP_CHECK=1", "TZ=UTC"}
	args := []string{"--invariant", "-F", "16", "-i", fmt.Sprintf("%08X", part.VolumeID), "-n", part.Label}
	if part.SectorsPerCluster > 0 {
		args = append(args, "-s", fmt.Sprint(part.SectorsPerCluster))
	}
	if err := run(ctx, env, "mkfs.vfat", append(args, img)...); err != nil {
		return "", err
	}
	stage := filepath.Join(work, fmt.Sprintf("part%d", part.Number))
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return "", err
	}
	// Stage copies with fixed mtimes; mcopy -m keeps them.
	var names []string
	for _, fl := range part.Files {
		if err := copyFile(fl.Src, filepath.Join(stage, fl.Name)); err != nil {
			return "", err
		}
		names = append(names, fl.Name)
	}
	for name, data := range part.Content {
		if err := os.WriteFile(filepath.Join(stage, name), data, 0o644); err != nil {
			return "", err
		}
		names = append(names, name)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(stage, n)
		if err := os.Chtimes(p, time.Unix(Epoch, 0), time.Unix(Epoch, 0)); err != nil {
			return "", err
		}
		if err := run(ctx, env, "mcopy", "-m", "-i", img, p, "::"+n); err != nil {
			return "", err
		}
	}
	if part.UKI != nil {
		if err := addUKI(ctx, *part.UKI, img, stage, env, run); err != nil {
			return "", fmt.Errorf("unified kernel image: %w", err)
		}
	}
	if part.Syslinux {
		if err := run(ctx, env, "syslinux", "--install", img); err != nil {
			return "", err
		}
	}
	return img, nil
}

// addUKI builds the unified kernel image with objcopy and copies it to
// UKIPath in the FAT image.
func addUKI(ctx context.Context, u UKI, img, stage string, env []string, run Runner) error {
	if err := checkStub(u.Stub); err != nil {
		return err
	}
	osrel, cmdline, out := filepath.Join(stage, "uki.osrel"), filepath.Join(stage, "uki.cmdline"), filepath.Join(stage, "bootx64.efi")
	if err := os.WriteFile(osrel, []byte(u.OSRel), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(cmdline, []byte(u.Cmdline), 0o644); err != nil {
		return err
	}
	if err := run(ctx, env, "objcopy", u.ObjcopyArgs(osrel, cmdline, out)...); err != nil {
		return err
	}
	if err := uefi.PinPETimestamp(out, Epoch); err != nil {
		return err
	}
	if err := os.Chtimes(out, time.Unix(Epoch, 0), time.Unix(Epoch, 0)); err != nil {
		return err
	}
	if err := run(ctx, env, "mmd", "-i", img, "::EFI", "::EFI/BOOT"); err != nil {
		return err
	}
	return run(ctx, env, "mcopy", "-m", "-i", img, out, "::"+UKIPath)
}

// checkStub refuses a stub whose image reaches into the sections the UKI
// layout adds (a newer, bigger stub would need other addresses).
func checkStub(path string) error {
	f, err := pe.Open(path)
	if err != nil {
		return fmt.Errorf("EFI stub %s: %w (apt install systemd-boot-efi)", path, err)
	}
	defer f.Close()
	oh, ok := f.OptionalHeader.(*pe.OptionalHeader64)
	if !ok {
		return fmt.Errorf("EFI stub %s: not a PE32+ (x86-64) image", path)
	}
	if end := oh.ImageBase + uint64(oh.SizeOfImage); end > ukiOSRelVMA {
		return fmt.Errorf("EFI stub %s: image ends at %#x, past the %#x where the UKI's sections start", path, end, ukiOSRelVMA)
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return out.Close()
}

// copyAt writes the image file src into w at off; src must be exactly size.
func copyAt(w io.WriterAt, src string, off, size int64) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != size {
		return fmt.Errorf("filesystem image %s is %d bytes, partition is %d", src, st.Size(), size)
	}
	_, err = io.Copy(io.NewOffsetWriter(w, off), f)
	return err
}
