// Package nvmehealth judges NVMe controllers by their SMART / Health
// Information log (Get Log Page 02h), read through tools/nvme's Admin seam.
//
// Field semantics follow NVMe Base Specification 2.0, Figure 207: any set
// Critical Warning bit is a failure; Available Spare is judged against the
// controller's own Available Spare Threshold; Percentage Used and Media and
// Data Integrity Errors against the suite's bars.
package nvmehealth

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/nvme"
)

// Device is an open controller: admin commands, then Close.
type Device interface {
	nvme.Admin
	Close() error
}

// Opener opens a controller character device (/dev/nvme0).
type Opener func(path string) (Device, error)

// OpenDevice opens a real controller through the admin ioctl.
func OpenDevice(path string) (Device, error) { return nvme.Open(path) }

// Options configure the check.
type Options struct {
	// Root holds sys/class/nvme and dev/ ("/" on a node).
	Root string
	// Open opens controllers; nil means OpenDevice.
	Open Opener
	// PercentageUsed bars the vendor's endurance-used estimate (percent).
	PercentageUsed checks.Limit
	// MediaErrors bars the Media and Data Integrity Errors count.
	MediaErrors checks.Limit
	// AvailableSpare is an absolute bar (percent) on top of the
	// controller's own threshold, which is always applied.
	AvailableSpare checks.Limit
	// TempC bars the composite temperature.
	TempC checks.Limit
	// IgnoreWarnings masks Critical Warning bits that must not fail the
	// check (e.g. nvme.WarnTemperature on a bench without airflow).
	IgnoreWarnings uint8
}

// Check reads the SMART / Health log of every controller and returns one
// verdict per controller, component nvme/<n> in controller-number order (the
// numbering runner/inventory uses).
func Check(ctx context.Context, o Options) ([]checks.Verdict, error) {
	open := o.Open
	if open == nil {
		open = OpenDevice
	}
	ctrls, err := nvme.Enumerate(o.Root)
	if err != nil {
		return nil, err
	}
	var out []checks.Verdict
	for i, c := range ctrls {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		comp := fmt.Sprintf("nvme/%d", i)
		l, err := readLog(open, filepath.Join(o.Root, "dev", c.Name))
		if err != nil {
			out = append(out, checks.Verdict{Component: comp, Status: checks.Error, Message: fmt.Sprintf("%s (%s %s): %v", c.Name, c.Model, c.Serial, err)})
			continue
		}
		v := Judge(comp, l, o)
		v.Message = strings.TrimPrefix(v.Message+"; "+fmt.Sprintf("%s %s serial %s", c.Name, c.Model, c.Serial), "; ")
		out = append(out, v)
	}
	return out, nil
}

func readLog(open Opener, path string) (*nvme.SMARTLog, error) {
	d, err := open(path)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return nvme.GetSMARTLog(d)
}

// Judge turns one SMART / Health log into a verdict.
func Judge(component string, l *nvme.SMARTLog, o Options) checks.Verdict {
	warn := l.CriticalWarning &^ o.IgnoreWarnings
	spare := checks.AtLeast(float64(l.AvailableSpareThreshold))
	if o.AvailableSpare.Min != nil && *o.AvailableSpare.Min > *spare.Min {
		spare.Min = o.AvailableSpare.Min
	}
	spare.Max = o.AvailableSpare.Max
	v := checks.Judge(component,
		checks.Value("criticalWarning", float64(warn), checks.AtMost(0)),
		checks.Value("availableSpare", float64(l.AvailableSpare), spare).In("%"),
		checks.Value("percentageUsed", float64(l.PercentageUsed), o.PercentageUsed).In("%"),
		checks.Value("mediaErrors", float64(l.MediaErrors), o.MediaErrors),
		checks.Value("tempC", float64(l.CompositeTempC()), o.TempC).In("C"),
		checks.Value("powerOnHours", float64(l.PowerOnHours), checks.Limit{}),
		checks.Value("errorLogEntries", float64(l.ErrorLogEntries), checks.Limit{}),
	)
	if names := l.WarningNames(); len(names) > 0 {
		v.Message = strings.TrimPrefix(v.Message+"; critical warning: "+strings.Join(names, ", "), "; ")
		if o.IgnoreWarnings != 0 {
			v.Message += fmt.Sprintf(" (mask %#02x ignored)", o.IgnoreWarnings)
		}
	}
	return v
}
