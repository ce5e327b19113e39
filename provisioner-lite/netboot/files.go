package netboot

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// MaxFileSize bounds an iPXE build read at start (Debian's largest,
// ipxe.efi, is under 1 MiB).
const MaxFileSize = 8 << 20

// Files are the iPXE builds served over TFTP (and HTTP for UEFI HTTP boot):
// read once at start, held in memory, looked up by exact name. Nothing a
// client sends reaches the file system, so no path can escape the set.
type Files struct {
	dir     string
	m       map[string][]byte
	loaded  time.Time
	missing []string
}

// LoadFiles reads names from dir. A missing file is recorded (Missing),
// not an error: the architectures that need it are then refused with a
// clear log line. A file that is not regular, larger than MaxFileSize, or
// unreadable is an error.
func LoadFiles(dir string, names []string) (*Files, error) {
	f := &Files{dir: dir, m: map[string][]byte{}, loaded: time.Now()}
	for _, n := range names {
		if n == "" || n != filepath.Base(n) || strings.ContainsAny(n, "/\\") || n == "." || n == ".." {
			return nil, fmt.Errorf("iPXE build %q: want a plain file name inside %s", n, dir)
		}
		if _, ok := f.m[n]; ok {
			continue
		}
		p := filepath.Join(dir, n)
		st, err := os.Stat(p) // follows symlinks: Debian links ipxe.efi to /boot
		if errors.Is(err, fs.ErrNotExist) {
			f.missing = append(f.missing, n)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("iPXE build %s: %w", p, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("iPXE build %s: not a regular file", p)
		}
		if st.Size() > MaxFileSize {
			return nil, fmt.Errorf("iPXE build %s: %d bytes, more than the %d served", p, st.Size(), MaxFileSize)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("iPXE build %s: %w", p, err)
		}
		if len(b) > MaxFileSize {
			return nil, fmt.Errorf("iPXE build %s: grew to %d bytes while read", p, len(b))
		}
		f.m[n] = b
	}
	if len(f.m) == 0 {
		return nil, fmt.Errorf("no iPXE build found in %s (looked for %s): install Debian's ipxe package or set --ipxe-dir", dir, strings.Join(names, ", "))
	}
	return f, nil
}

// Names lists the files served, sorted.
func (f *Files) Names() []string {
	var n []string
	for k := range f.m {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

// Missing lists the names LoadFiles did not find.
func (f *Files) Missing() []string { return slices.Clone(f.missing) }

// Has reports whether name is served.
func (f *Files) Has(name string) bool { _, ok := f.m[name]; return ok }

// Lookup resolves a requested name: the exact name of a served file, with
// at most one leading '/' (firmwares differ). Anything else is not found.
func (f *Files) Lookup(req string) (string, []byte, bool) {
	n := strings.TrimPrefix(req, "/")
	b, ok := f.m[n]
	if !ok {
		return "", nil, false
	}
	return n, b, true
}

// Handler serves the files over HTTP at <prefix>/<name> (GET and HEAD),
// for UEFI HTTP boot. Mount it with the prefix stripped.
func (f *Files) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name, b, ok := f.Lookup(r.URL.Path)
		if !ok {
			http.Error(w, "no such iPXE build: want one of "+strings.Join(f.Names(), ", "), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/efi")
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, name, f.loaded, bytes.NewReader(b))
	})
}
