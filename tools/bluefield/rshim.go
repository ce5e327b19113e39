package bluefield

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cure-oss/cure/tools/mstflint"
)

// SkipError is shared with tools/mstflint: the adapter cannot run here.
type SkipError = mstflint.SkipError

// Rshim is the seam over one /dev/rshimN directory.
type Rshim interface {
	Name() string
	ReadMisc() ([]byte, error)
	// WriteMisc writes one "KEY value" command (SW_RESET 1, DISPLAY_LEVEL 2).
	WriteMisc(cmd string) error
	// OpenBoot opens the boot stream; the driver resets the Arm side into
	// rshim boot and feeds it what is written.
	OpenBoot() (io.WriteCloser, error)
}

// Dev is a real rshim device directory.
type Dev struct{ Dir string }

// Open checks that dir (e.g. /dev/rshim0) is an rshim device directory;
// absent rshim (no DPU, or the rshim driver not running) is a SkipError.
func Open(dir string) (*Dev, error) {
	if _, err := os.Stat(filepath.Join(dir, "misc")); errors.Is(err, fs.ErrNotExist) {
		return nil, &SkipError{Reason: fmt.Sprintf("no rshim device at %s (no BlueField, or the rshim driver is not running)", dir)}
	} else if err != nil {
		return nil, fmt.Errorf("rshim %s: %w", dir, err)
	}
	return &Dev{Dir: dir}, nil
}

// Find lists rshim device directories under devRoot ("/dev" in production).
func Find(devRoot string) ([]string, error) {
	m, err := filepath.Glob(filepath.Join(devRoot, "rshim[0-9]*"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range m {
		if _, err := os.Stat(filepath.Join(d, "misc")); err == nil {
			out = append(out, d)
		}
	}
	return out, nil
}

// OpenAll opens every rshim device under devRoot ("/dev" in production).
func OpenAll(devRoot string) ([]Rshim, error) {
	dirs, err := Find(devRoot)
	if err != nil {
		return nil, fmt.Errorf("list rshim devices: %w", err)
	}
	var out []Rshim
	for _, d := range dirs {
		r, err := Open(d)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (d *Dev) Name() string { return d.Dir }

func (d *Dev) ReadMisc() ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(d.Dir, "misc"))
	if err != nil {
		return nil, fmt.Errorf("read rshim misc: %w", err)
	}
	return b, nil
}

func (d *Dev) WriteMisc(cmd string) error {
	p := filepath.Join(d.Dir, "misc")
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("rshim misc %q: %w", cmd, err)
	}
	// The driver parses one command per write.
	if _, err := f.Write([]byte(cmd + "\n")); err != nil {
		f.Close()
		return fmt.Errorf("rshim misc %q to %s: %w", cmd, p, err)
	}
	return f.Close()
}

func (d *Dev) OpenBoot() (io.WriteCloser, error) {
	f, err := os.OpenFile(filepath.Join(d.Dir, "boot"), os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open rshim boot: %w", err)
	}
	return f, nil
}
