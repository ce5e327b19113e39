package pci

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Link is a function's PCIe link as the kernel reads it from the device's
// PCI Express capability: negotiated (Link Status) against capable (Link
// Capabilities). A speed or width of 0 is a link that is down or that the
// kernel reports as "Unknown".
type Link struct {
	SpeedGTs    float64 // current_link_speed
	Width       int     // current_link_width
	MaxSpeedGTs float64 // max_link_speed
	MaxWidth    int     // max_link_width
}

// Degraded reports whether the link trained below what the function can
// do (slower or narrower), the usual sign of a bad riser, cable or slot.
// A link whose capability is unknown is not judged here.
func (l Link) Degraded() bool {
	return (l.MaxSpeedGTs > 0 && l.SpeedGTs < l.MaxSpeedGTs) || (l.MaxWidth > 0 && l.Width < l.MaxWidth)
}

// String is "16 GT/s x4 (capable 16 GT/s x16)", the capability left out
// when it is what was negotiated.
func (l Link) String() string {
	s := Speed(l.SpeedGTs) + " " + Width(l.Width)
	if l.SpeedGTs != l.MaxSpeedGTs || l.Width != l.MaxWidth {
		s += fmt.Sprintf(" (capable %s %s)", Speed(l.MaxSpeedGTs), Width(l.MaxWidth))
	}
	return s
}

// Speed formats a link speed as the kernel's log does ("2.5 GT/s",
// "16 GT/s"); 0 is "link down".
func Speed(gts float64) string {
	if gts <= 0 {
		return "down"
	}
	return strconv.FormatFloat(gts, 'f', -1, 64) + " GT/s"
}

// Width formats a lane count ("x4"); 0 is "x?".
func Width(w int) string {
	if w <= 0 {
		return "x?"
	}
	return "x" + strconv.Itoa(w)
}

// generations are the PCIe base specification's transfer rates, per
// generation (1-6).
var generations = []float64{2.5, 5, 8, 16, 32, 64}

// Gen is the PCIe generation of a transfer rate (2.5 GT/s is gen 1,
// 32 GT/s gen 5); 0 for a rate that is no generation's.
func Gen(gts float64) int {
	for i, g := range generations {
		if gts == g {
			return i + 1
		}
	}
	return 0
}

// GenSpeed is the transfer rate of a PCIe generation (1-6); 0 otherwise.
func GenSpeed(gen int) float64 {
	if gen < 1 || gen > len(generations) {
		return 0
	}
	return generations[gen-1]
}

// ErrNoLink means the function has no PCIe link attributes: a
// conventional PCI device, or a root-complex integrated endpoint.
var ErrNoLink = errors.New("no PCIe link")

// Link reads the function's link attributes. ErrNoLink when it has none
// (or reports neither speed nor width), another error when one is unreadable.
func (f Function) Link() (Link, error) {
	var l Link
	var err error
	read := func(name string, parse func(string) error) {
		if err != nil {
			return
		}
		b, rerr := os.ReadFile(filepath.Join(f.Dir, name))
		if rerr != nil {
			err = rerr
			return
		}
		if perr := parse(strings.TrimSpace(string(b))); perr != nil {
			err = fmt.Errorf("%s: %w", filepath.Join(f.Dir, name), perr)
		}
	}
	speed := func(dst *float64) func(string) error {
		return func(s string) error { v, e := ParseLinkSpeed(s); *dst = v; return e }
	}
	width := func(dst *int) func(string) error {
		return func(s string) error { v, e := ParseLinkWidth(s); *dst = v; return e }
	}
	read("max_link_speed", speed(&l.MaxSpeedGTs))
	read("max_link_width", width(&l.MaxWidth))
	read("current_link_speed", speed(&l.SpeedGTs))
	read("current_link_width", width(&l.Width))
	if errors.Is(err, fs.ErrNotExist) {
		return Link{}, ErrNoLink
	}
	if err != nil {
		return Link{}, err
	}
	if l.MaxSpeedGTs == 0 && l.MaxWidth == 0 {
		return Link{}, ErrNoLink
	}
	return l, nil
}

// ParseLinkSpeed reads a sysfs link speed: "16.0 GT/s PCIe" (Linux 4.18
// and later), "8 GT/s" (earlier), "Unknown" (0, no error). Anything else
// is an error.
func ParseLinkSpeed(s string) (float64, error) {
	if s == "Unknown" || s == "" {
		return 0, nil
	}
	num, rest, ok := strings.Cut(s, " GT/s")
	if !ok || (rest != "" && rest != " PCIe") {
		return 0, fmt.Errorf("%q is not a PCIe link speed (want e.g. \"16.0 GT/s PCIe\")", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 || v > 1024 || math.IsNaN(v) || strings.ContainsAny(num, "eEpPxX_+-") {
		return 0, fmt.Errorf("%q is not a PCIe link speed (want e.g. \"16.0 GT/s PCIe\")", s)
	}
	return v, nil
}

// ParseLinkWidth reads a sysfs link width: a lane count ("16"); some
// kernels write "x16".
func ParseLinkWidth(s string) (int, error) {
	t := strings.TrimPrefix(s, "x")
	v, err := strconv.Atoi(t)
	if err != nil || v < 0 || v > 32 || t != strconv.Itoa(v) {
		return 0, fmt.Errorf("%q is not a PCIe link width (want a lane count, 0 to 32)", s)
	}
	return v, nil
}

var addrRE = regexp.MustCompile(`^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// Upstream is the address of the bridge or port above the function in
// the device tree (the parent directory of its real sysfs path); "" at
// the top of a hierarchy or when the tree has no such path (a fixture).
func (f Function) Upstream() string {
	real, err := filepath.EvalSymlinks(f.Dir)
	if err != nil {
		return ""
	}
	parent := filepath.Base(filepath.Dir(real))
	if addrRE.MatchString(parent) {
		return parent
	}
	return ""
}

// ByAddr returns the function at a PCI address under root (its directory
// need not exist: reading it then fails).
func ByAddr(root, addr string) Function {
	return Function{Addr: addr, Dir: filepath.Join(root, "sys/bus/pci/devices", addr)}
}
