package bootserver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ArtifactPath is where the artifact with that sha256 lives in the store.
func ArtifactPath(artifactDir, sha256hex string) string {
	return filepath.Join(artifactDir, "sha256", sha256hex)
}

// ImportArtifact copies the file at path into the content-addressed store under
// artifactDir and returns its sha256 and size. The copy is written to a temp
// file in the store and renamed into place, so a reader never sees a partial
// artifact; importing the same content again is a no-op.
func ImportArtifact(artifactDir, path string) (sha256hex string, size int64, err error) {
	src, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("import artifact: %w", err)
	}
	defer src.Close()
	if st, err := src.Stat(); err != nil {
		return "", 0, fmt.Errorf("import artifact %s: %w", path, err)
	} else if !st.Mode().IsRegular() {
		return "", 0, fmt.Errorf("import artifact %s: not a regular file (%s)", path, st.Mode().Type())
	}
	dir := filepath.Join(artifactDir, "sha256")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, fmt.Errorf("import artifact %s: create store: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, ".import-*")
	if err != nil {
		return "", 0, fmt.Errorf("import artifact %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	h := sha256.New()
	size, err = io.Copy(io.MultiWriter(tmp, h), src)
	if err != nil {
		tmp.Close()
		return "", 0, fmt.Errorf("import artifact %s: copy: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", 0, fmt.Errorf("import artifact %s: sync: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return "", 0, fmt.Errorf("import artifact %s: %w", path, err)
	}
	sha256hex = hex.EncodeToString(h.Sum(nil))
	final := ArtifactPath(artifactDir, sha256hex)
	if st, err := os.Stat(final); err == nil {
		if st.Size() != size {
			return "", 0, fmt.Errorf("import artifact %s: %s already exists with %d bytes, expected %d: the store is corrupt, remove it", path, final, st.Size(), size)
		}
		return sha256hex, size, nil
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return "", 0, fmt.Errorf("import artifact %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", 0, fmt.Errorf("import artifact %s: %w", path, err)
	}
	return sha256hex, size, nil
}
