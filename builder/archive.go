package builder

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/cure-oss/cure/builder/kmod"
	"github.com/klauspost/compress/zstd"
	"github.com/u-root/mkuimage/cpio"
)

// moduleRecords returns the archive records for the kernel modules in mods
// plus the generated modules.dep and modules.alias, under lib/modules/<kver>.
// modules.builtin is copied when present so u-root's kmodule treats builtin
// dependencies as loaded.
func moduleRecords(ix *kmod.Index, kver string, mods []*kmod.Module, compress bool) ([]cpio.Record, error) {
	base := path.Join("lib/modules", kver)
	var recs []cpio.Record
	suffix := ""
	var enc *zstd.Encoder
	if compress {
		suffix = ".zst"
		var err error
		// One goroutine and a fixed level: the same module gives the
		// same bytes.
		if enc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(1)); err != nil {
			return nil, err
		}
		defer enc.Close()
	}
	for _, m := range mods {
		data, err := os.ReadFile(ix.HostPath(m))
		if err != nil {
			return nil, fmt.Errorf("reading module %s: %w", m.Name, err)
		}
		name := m.Path
		if compress && strings.HasSuffix(name, ".ko") { // one the kernel package compressed stays as it is
			data, name = enc.EncodeAll(data, nil), name+suffix
		}
		recs = append(recs, fileRecord(path.Join(base, name), data, 0o644))
	}
	var dep, alias bytes.Buffer
	if err := ix.WriteDepSuffix(&dep, mods, suffix); err != nil {
		return nil, fmt.Errorf("writing modules.dep: %w", err)
	}
	if err := kmod.WriteAlias(&alias, mods); err != nil {
		return nil, fmt.Errorf("writing modules.alias: %w", err)
	}
	recs = append(recs,
		fileRecord(path.Join(base, "modules.dep"), dep.Bytes(), 0o644),
		fileRecord(path.Join(base, "modules.alias"), alias.Bytes(), 0o644))
	if b, err := os.ReadFile(path.Join(ix.Dir, "modules.builtin")); err == nil {
		recs = append(recs, fileRecord(path.Join(base, "modules.builtin"), b, 0o644))
	} else if !os.IsNotExist(err) {
		return nil, fmt.Errorf("reading modules.builtin: %w", err)
	}
	return recs, nil
}

// hostFileRecord reads a host file into a record. Only the executable bit is
// kept from the host mode, so the archive does not depend on umask or
// ownership on the build machine.
func hostFileRecord(src, dst string) (cpio.Record, error) {
	st, err := os.Stat(src)
	if err != nil {
		return cpio.Record{}, err
	}
	if !st.Mode().IsRegular() {
		return cpio.Record{}, fmt.Errorf("%s: expected a regular file, found %s", src, st.Mode().Type())
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return cpio.Record{}, err
	}
	perm := uint64(0o644)
	if st.Mode()&0o111 != 0 {
		perm = 0o755
	}
	return fileRecord(dst, data, perm), nil
}

func fileRecord(name string, data []byte, perm uint64) cpio.Record {
	return cpio.StaticRecord(data, cpio.Info{
		Name:     name,
		Mode:     cpio.S_IFREG | perm,
		FileSize: uint64(len(data)),
	})
}
