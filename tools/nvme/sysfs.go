package nvme

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/cure-oss/cure/tools/pci"
)

// Info is what sysfs says about one controller, without issuing commands.
type Info struct {
	Name        string   // nvme0
	DevPath     string   // /dev/nvme0
	Model       string   // model
	Serial      string   // serial
	FirmwareRev string   // firmware_rev (the running revision)
	Address     string   // PCI address, e.g. 0000:00:04.0
	VendorID    uint16   // device/vendor (PCI vendor ID)
	Namespaces  []string // block devices: nvme0n1, ...
}

var (
	controllerName = regexp.MustCompile(`^nvme[0-9]+$`)
	// Namespace block devices: nvme0n1 (or, under native multipath, the
	// hidden per-path node nvme0c0n1, reported as its head nvme0n1).
	namespaceName = regexp.MustCompile(`^nvme([0-9]+)(?:c[0-9]+)?n([0-9]+)$`)
)

// Enumerate lists controllers under sysRoot/sys/class/nvme ("/" in
// production, a fixture tree in tests), sorted by controller number.
// A missing class directory (driver not loaded) yields no controllers.
func Enumerate(sysRoot string) ([]Info, error) {
	classDir := filepath.Join(sysRoot, "sys/class/nvme")
	entries, err := os.ReadDir(classDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list nvme controllers: %w", err)
	}
	var out []Info
	for _, e := range entries {
		name := e.Name()
		if !controllerName.MatchString(name) {
			continue
		}
		dir := filepath.Join(classDir, name)
		info := Info{Name: name, DevPath: "/dev/" + name}
		for _, f := range []struct {
			file string
			dst  *string
		}{
			{"model", &info.Model},
			{"serial", &info.Serial},
			{"firmware_rev", &info.FirmwareRev},
			{"address", &info.Address},
		} {
			v, err := readTrim(filepath.Join(dir, f.file))
			if err != nil {
				return nil, fmt.Errorf("nvme controller %s: %w", name, err)
			}
			*f.dst = v
		}
		if v, err := readTrim(filepath.Join(dir, "device/vendor")); err == nil {
			id, perr := pci.ParseVendorID(v)
			if perr != nil {
				return nil, fmt.Errorf("nvme controller %s: device/vendor: %w", name, perr)
			}
			info.VendorID = id
		} else if !errors.Is(err, fs.ErrNotExist) {
			// Fabrics controllers have no PCI device; anything else is real trouble.
			return nil, fmt.Errorf("nvme controller %s: %w", name, err)
		}
		ns, err := namespaces(dir, name)
		if err != nil {
			return nil, err
		}
		info.Namespaces = ns
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return ctrlNum(out[i].Name) < ctrlNum(out[j].Name) })
	return out, nil
}

// namespaces lists the namespace block devices below a controller dir.
func namespaces(dir, ctrl string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("nvme controller %s: list namespaces: %w", ctrl, err)
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range entries {
		m := namespaceName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		// Under native multipath the controller holds nvme<subsys>c<ctrl>n<ns>;
		// the usable block device is the head nvme<subsys>n<ns>.
		head := "nvme" + m[1] + "n" + m[2]
		if !seen[head] {
			seen[head] = true
			out = append(out, head)
		}
	}
	sort.Strings(out)
	return out, nil
}

func ctrlNum(name string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(name, "nvme"))
	return n
}

// readTrim reads a sysfs attribute. model, serial and firmware_rev are
// the controller's Identify bytes as the kernel copied them: not
// necessarily UTF-8, which protobuf strings must be.
func readTrim(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return validUTF8(strings.TrimSpace(string(b))), nil
}
