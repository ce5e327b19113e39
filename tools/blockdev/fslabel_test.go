package blockdev

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cure-oss/cure/tools/testenv"
)

// TestFSLabelMkfs reads back what Debian's mkfs.ext4 and mkfs.xfs write,
// on sparse files (xfs needs 300 MB; nothing is written but metadata).
func TestFSLabelMkfs(t *testing.T) {
	for _, c := range []struct {
		tool, fstype, label string
		size                int64
		args                []string
	}{
		{"mkfs.ext4", "ext4", "data-volume01", 16 << 20, []string{"-q", "-F", "-L"}},
		{"mkfs.xfs", "xfs", "scratch", 300 << 20, []string{"-q", "-f", "-L"}},
	} {
		tool, err := exec.LookPath(c.tool)
		if err != nil {
			testenv.Missing(t, c.tool+" (e2fsprogs, xfsprogs: scripts/install-deps.sh image)")
			return
		}
		p := filepath.Join(t.TempDir(), c.fstype)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, c.size); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(tool, append(c.args, c.label, p)...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", c.tool, err, out)
		}
		fstype, label, err := FSLabelOf(p)
		if err != nil || fstype != c.fstype || label != c.label {
			t.Errorf("%s: FSLabelOf = %q %q %v, want %q %q", c.tool, fstype, label, err, c.fstype, c.label)
		}
	}
}

func TestFSLabelNone(t *testing.T) {
	if _, _, err := FSLabel(bytes.NewReader(make([]byte, 4096))); !errors.Is(err, ErrNoFilesystem) {
		t.Errorf("zeros: %v", err)
	}
	if _, _, err := FSLabel(bytes.NewReader(make([]byte, 100))); err == nil {
		t.Error("short device accepted")
	}
}

func FuzzFSLabel(f *testing.F) {
	f.Add(append([]byte("XFSB"), make([]byte, 2044)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = FSLabel(bytes.NewReader(b))
	})
}
