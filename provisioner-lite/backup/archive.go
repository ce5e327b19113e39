// Package backup writes and restores an online, consistent copy of a
// coordinator: its store (SQLite through VACUUM INTO, PostgreSQL through
// one REPEATABLE READ transaction dumping every table) and its state dir
// (the state key, the PKI, the artifact store; never the lock). The copy
// is one zstd-compressed tar ending with a manifest that names the format,
// the CURE that wrote it, the store's schema version and each member's
// sha256; a restore verifies every member before it puts anything in
// place. The archive holds the state key and the CA key: it is as secret
// as the state dir (written 0600).
package backup

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
)

// Format is the archive format this package writes and reads.
const Format = 1

// ManifestName is the archive's last member.
const ManifestName = "MANIFEST.json"

// Member prefixes: the state dir's files, and the database.
const (
	statePrefix = "state/"
	dbPrefix    = "db/"
	sqliteName  = dbPrefix + "cure.db"
	pgPrefix    = dbPrefix + "postgres/"
)

// Database kinds a manifest names.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
)

// Manifest describes an archive.
type Manifest struct {
	Format      int       `json:"format"`
	CUREVersion string    `json:"cure_version"` // the binary that wrote the archive
	Created     time.Time `json:"created"`
	Database    string    `json:"database"` // SQLite or Postgres
	Schema      int       `json:"schema_version"`
	// StoreCUREVersion is the CURE that last migrated the store ("" when
	// the store predates the record).
	StoreCUREVersion string   `json:"store_cure_version,omitempty"`
	Tables           []Table  `json:"tables,omitempty"` // PostgreSQL: in load order
	Members          []Member `json:"members"`
}

// Table is one PostgreSQL table's dump (COPY text format).
type Table struct {
	Name    string   `json:"name"`
	Columns []string `json:"columns"`
	Member  string   `json:"member"`
}

// Member is one archive entry.
type Member struct {
	Name   string `json:"name"`
	Dir    bool   `json:"dir,omitempty"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
}

// writer appends members to a tar.zst and keeps the manifest.
type writer struct {
	zw *zstd.Encoder
	tw *tar.Writer
	m  Manifest
}

func newWriter(w io.Writer) (*writer, error) {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(archiveWindow))
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	return &writer{zw: zw, tw: tar.NewWriter(zw)}, nil
}

func (w *writer) addDir(name string, mtime time.Time) error {
	if err := w.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o700, ModTime: mtime}); err != nil {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	w.m.Members = append(w.m.Members, Member{Name: name, Dir: true})
	return nil
}

// addFile writes exactly size bytes of r as name; a reader that ends
// early (a file truncated while it was copied) fails the backup.
func (w *writer) addFile(name string, r io.Reader, size int64, mtime time.Time) error {
	if err := w.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: size, ModTime: mtime}); err != nil {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	h := sha256.New()
	n, err := io.CopyN(w.tw, io.TeeReader(r, h), size)
	if err != nil {
		return fmt.Errorf("archive %s: %d of %d bytes copied (changed while it was backed up?): %w", name, n, size, err)
	}
	w.m.Members = append(w.m.Members, Member{Name: name, Size: size, SHA256: hex.EncodeToString(h.Sum(nil))})
	return nil
}

// addPath adds the file at p as name.
func (w *writer) addPath(name, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	return w.addFile(name, f, st.Size(), st.ModTime())
}

// close writes the manifest last and ends the stream.
func (w *writer) close() error {
	w.m.Format = Format
	b, err := json.MarshalIndent(w.m, "", "  ")
	if err != nil {
		return err
	}
	if err := w.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: ManifestName, Mode: 0o600, Size: int64(len(b)), ModTime: w.m.Created}); err != nil {
		return fmt.Errorf("archive manifest: %w", err)
	}
	if _, err := w.tw.Write(b); err != nil {
		return fmt.Errorf("archive manifest: %w", err)
	}
	if err := w.tw.Close(); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	if err := w.zw.Close(); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	return nil
}

// archiveWindow is the zstd window the writer uses and the most a reader
// accepts: a hostile archive cannot make a restore hold more.
const archiveWindow = 8 << 20

// maxManifest bounds the manifest a reader accepts.
const maxManifest = 16 << 20

// ExtractLimits bound what Extract writes.
type ExtractLimits struct {
	MaxBytes int64 // total bytes of the members (0: no bound)
}

// Extract reads an archive from r into dir (which must exist, empty),
// each member's hash computed as it is written, and returns its manifest
// once every member matches it: the same names, kinds, sizes and sha256,
// none missing and none extra. Only regular files and directories under
// state/ and db/ are accepted, by clean relative names; the manifest
// must be the last entry. On error dir holds a partial extraction the
// caller removes.
func Extract(r io.Reader, dir string, lim ExtractLimits) (*Manifest, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(256<<20), zstd.WithDecoderMaxWindow(archiveWindow))
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	seen := map[string]Member{}
	var m *Manifest
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("archive: entry %d: %w", len(seen)+1, err)
		}
		if m != nil {
			return nil, fmt.Errorf("archive: %q after the manifest (the manifest must be last)", hdr.Name)
		}
		if hdr.Name == ManifestName {
			if m, err = readManifest(tr, hdr); err != nil {
				return nil, err
			}
			continue
		}
		mem, err := extractEntry(tr, hdr, dir, lim.MaxBytes-total, lim.MaxBytes > 0)
		if err != nil {
			return nil, err
		}
		if _, dup := seen[mem.Name]; dup {
			return nil, fmt.Errorf("archive: %q appears twice", mem.Name)
		}
		seen[mem.Name] = mem
		total += mem.Size
	}
	if m == nil {
		return nil, errors.New("archive: no " + ManifestName + " (truncated, or not a CURE backup)")
	}
	if err := m.verify(seen); err != nil {
		return nil, err
	}
	return m, nil
}

func readManifest(tr *tar.Reader, hdr *tar.Header) (*Manifest, error) {
	if hdr.Typeflag != tar.TypeReg || hdr.Size > maxManifest {
		return nil, fmt.Errorf("archive: %s is not a regular file under %d bytes", ManifestName, maxManifest)
	}
	b, err := io.ReadAll(io.LimitReader(tr, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("archive: %s: %w", ManifestName, err)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("archive: %s: %w", ManifestName, err)
	}
	if m.Format != Format {
		return nil, fmt.Errorf("archive: %s: format %d, this provisioner-lite (CURE %s) reads format %d", ManifestName, m.Format, cureVersion(), Format)
	}
	return &m, nil
}

// extractEntry writes one tar entry under dir and describes it.
func extractEntry(tr *tar.Reader, hdr *tar.Header, dir string, room int64, bounded bool) (Member, error) {
	name := strings.TrimSuffix(hdr.Name, "/")
	if err := checkName(name); err != nil {
		return Member{}, err
	}
	dst := filepath.Join(dir, filepath.FromSlash(name))
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := os.MkdirAll(dst, 0o700); err != nil {
			return Member{}, fmt.Errorf("archive: %s: %w", name, err)
		}
		return Member{Name: name, Dir: true}, nil
	case tar.TypeReg:
	default:
		return Member{}, fmt.Errorf("archive: %s: entry type %q: only regular files and directories are restored", name, hdr.Typeflag)
	}
	if hdr.Size < 0 || (bounded && hdr.Size > room) {
		return Member{}, fmt.Errorf("archive: %s: %d bytes is past the extraction bound", name, hdr.Size)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return Member{}, fmt.Errorf("archive: %s: %w", name, err)
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return Member{}, fmt.Errorf("archive: %s: %w", name, err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), tr)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Member{}, fmt.Errorf("archive: %s: %w", name, err)
	}
	return Member{Name: name, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// checkName accepts a clean relative slash path under state/ or db/.
func checkName(name string) error {
	ok := (strings.HasPrefix(name, statePrefix) || strings.HasPrefix(name, dbPrefix) || name+"/" == statePrefix || name+"/" == dbPrefix) &&
		path.Clean(name) == name && !path.IsAbs(name) && !strings.Contains(name, "\\") && !strings.ContainsRune(name, 0)
	for _, part := range strings.Split(name, "/") {
		if part == ".." || part == "." || part == "" {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("archive: member name %q: not a clean path under %s or %s", name, statePrefix, dbPrefix)
	}
	return nil
}

// verify compares what was read with the manifest.
func (m *Manifest) verify(read map[string]Member) error {
	listed := map[string]bool{}
	for _, want := range m.Members {
		if listed[want.Name] {
			return fmt.Errorf("archive: %s lists %q twice", ManifestName, want.Name)
		}
		listed[want.Name] = true
		got, ok := read[want.Name]
		switch {
		case !ok:
			return fmt.Errorf("archive: %q is in %s but not in the archive", want.Name, ManifestName)
		case got.Dir != want.Dir:
			return fmt.Errorf("archive: %q: a directory in one of the archive and %s, a file in the other", want.Name, ManifestName)
		case got.Size != want.Size || got.SHA256 != want.SHA256:
			return fmt.Errorf("archive: %q: %d bytes with sha256 %s, %s says %d bytes with sha256 %s: the archive is damaged",
				want.Name, got.Size, got.SHA256, ManifestName, want.Size, want.SHA256)
		}
	}
	for name := range read {
		if !listed[name] {
			return fmt.Errorf("archive: %q is not listed in %s", name, ManifestName)
		}
	}
	for _, tb := range m.Tables {
		if !listed[tb.Member] || !strings.HasPrefix(tb.Member, pgPrefix) {
			return fmt.Errorf("archive: table %s: member %q is not a listed dump", tb.Name, tb.Member)
		}
	}
	switch m.Database {
	case SQLite:
		if !listed[sqliteName] {
			return fmt.Errorf("archive: a SQLite backup without %s", sqliteName)
		}
	case Postgres:
	default:
		return fmt.Errorf("archive: %s: database %q, want %s or %s", ManifestName, m.Database, SQLite, Postgres)
	}
	return nil
}
