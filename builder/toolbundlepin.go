package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	tbbuild "github.com/cure-oss/cure/builder/toolbundle"
	"github.com/cure-oss/cure/tools/toolbundle"
)

// ToolBundleReport is report.json's record of the tool bundle the image
// pins (the spec's tool_bundle_path): what the coordinator must serve for
// cure-tools in the debug shell to work.
type ToolBundleReport struct {
	Path   string   `json:"path"` // in the image
	SHA256 string   `json:"sha256"`
	Size   int64    `json:"size"`
	Tools  []string `json:"tools"`
}

// PinToolBundle reads a built tool bundle's toolbundle.json (the file, or
// the directory make toolbundle wrote), checks that the archive beside it
// is the one it describes (size and sha256: a stale report would pin a
// bundle nobody serves), and returns the pin the image carries.
func PinToolBundle(file string) (*toolbundle.Pin, error) {
	if st, err := os.Stat(file); err == nil && st.IsDir() {
		file = filepath.Join(file, tbbuild.ReportName)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--pin-tool-bundle: %w (build the bundle first: make toolbundle)", err)
	}
	var r tbbuild.Report
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("--pin-tool-bundle %s: %w", file, err)
	}
	if r.Manifest == nil || r.File == "" || filepath.Base(r.File) != r.File {
		return nil, fmt.Errorf("--pin-tool-bundle %s: not a tool bundle report (no manifest or file)", file)
	}
	archive := filepath.Join(filepath.Dir(file), r.File)
	size, sum, err := hashArchive(archive)
	if err != nil {
		return nil, fmt.Errorf("--pin-tool-bundle %s: %w", file, err)
	}
	if size != r.Size || sum != r.SHA256 {
		return nil, fmt.Errorf("--pin-tool-bundle %s describes %s as %d bytes sha256 %s, but it is %d bytes sha256 %s: rebuild the bundle (make toolbundle)",
			file, archive, r.Size, r.SHA256, size, sum)
	}
	p, err := toolbundle.NewPin(r.SHA256, r.Size, r.Manifest)
	if err != nil {
		return nil, fmt.Errorf("--pin-tool-bundle %s: %w", file, err)
	}
	return p, nil
}

func hashArchive(p string) (int64, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("%s: %w", p, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// pinRecord is the pin as an image file.
func pinRecord(p *toolbundle.Pin) ([]byte, error) {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
