package inventory

import (
	"fmt"
	"log/slog"
	"path/filepath"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/nvme"
)

// AdminCloser is an NVMe controller handle: admin commands, then Close.
type AdminCloser interface {
	nvme.Admin
	Close() error
}

// OpenFunc opens an NVMe controller character device.
type OpenFunc func(path string) (AdminCloser, error)

// OpenDevice opens a real controller through tools/nvme (the admin ioctl).
func OpenDevice(path string) (AdminCloser, error) { return nvme.Open(path) }

// Controller is one NVMe controller as seen by sysfs and, when it worked,
// by Identify Controller.
type Controller struct {
	Index    int // position in controller-number order: nvme/<Index>
	Info     nvme.Info
	Identify *nvme.Controller // nil when Identify was not possible
	// IdentifyErr says why Identify is nil (the values then come from sysfs).
	IdentifyErr error
}

// Model, Serial, Firmware and VendorID prefer Identify data over sysfs.
func (c *Controller) Model() string {
	if c.Identify != nil {
		return c.Identify.MN
	}
	return c.Info.Model
}

func (c *Controller) Serial() string {
	if c.Identify != nil {
		return c.Identify.SN
	}
	return c.Info.Serial
}

func (c *Controller) Firmware() string {
	if c.Identify != nil {
		return c.Identify.FR
	}
	return c.Info.FirmwareRev
}

func (c *Controller) VendorID() uint16 {
	if c.Identify != nil {
		return c.Identify.VID
	}
	return c.Info.VendorID
}

// Source names where the values came from, for verdict messages.
func (c *Controller) Source() string {
	if c.Identify != nil {
		return "identify"
	}
	return "sysfs"
}

// Proto converts to the wire form.
func (c *Controller) Proto() *curev1.NvmeController {
	return &curev1.NvmeController{
		Name: c.Info.Name, Model: c.Model(), Serial: c.Serial(), Firmware: c.Firmware(),
		PciAddress: c.Info.Address, VendorId: uint32(c.VendorID()), Namespaces: c.Info.Namespaces,
	}
}

// NVMeControllers lists controllers from sysfs under root and asks each for
// Identify Controller through open (OpenDevice when nil) on root/dev/nvmeN.
// A controller that cannot be identified keeps its sysfs values; the reason
// is logged and kept in IdentifyErr.
func NVMeControllers(root string, open OpenFunc, noIdentify bool, log *slog.Logger) ([]*Controller, error) {
	if open == nil {
		open = OpenDevice
	}
	if log == nil {
		log = slog.Default()
	}
	infos, err := nvme.Enumerate(root)
	if err != nil {
		return nil, err
	}
	out := make([]*Controller, 0, len(infos))
	for i, info := range infos {
		c := &Controller{Index: i, Info: info}
		out = append(out, c)
		if noIdentify {
			c.IdentifyErr = fmt.Errorf("identify disabled")
			continue
		}
		dev := filepath.Join(root, "dev", info.Name)
		c.Identify, c.IdentifyErr = identify(open, dev)
		if c.IdentifyErr != nil {
			log.Warn("nvme identify failed; using sysfs values", "controller", info.Name, "err", c.IdentifyErr)
		}
	}
	return out, nil
}

func identify(open OpenFunc, dev string) (*nvme.Controller, error) {
	a, err := open(dev)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	id, err := nvme.IdentifyController(a)
	if err != nil {
		return nil, fmt.Errorf("identify controller %s: %w", dev, err)
	}
	return id, nil
}
