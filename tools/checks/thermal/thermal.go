// Package thermal judges hwmon temperature sensors against their own limits
// (temp*_crit, temp*_max, alarms) read from a sysfs root.
//
// Units follow the kernel's hwmon sysfs ABI (Documentation/hwmon/sysfs-interface.rst):
// temperatures in millidegrees Celsius, alarms 0/1.
package thermal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/cure-oss/cure/tools/checks"
)

// Options configure the check.
type Options struct {
	SysRoot string // "/" on a node, a fixture tree in tests
	// MarginC fails a sensor that comes within this many degrees of its
	// limit; zero fails only at or over the limit.
	MarginC float64
	// IgnoreMax judges against temp*_crit only: some boards set temp*_max
	// to a fan-curve point rather than a safety limit.
	IgnoreMax bool
	// TempC is an absolute bar applied to every sensor on top of its own.
	TempC checks.Limit
}

var (
	hwmonName = regexp.MustCompile(`^hwmon([0-9]+)$`)
	tempInput = regexp.MustCompile(`^temp([0-9]+)_input$`)
)

type sensor struct {
	hwmon int
	dir   string
	name  string // hwmon name attribute
	index int    // N of tempN_*
	label string
}

// Check reads every hwmon temperature sensor once and returns one verdict
// per sensor, component hwmon/<name>/<label> (the label defaults to tempN;
// a name shared by several hwmon devices gets "-<hwmon index>" appended).
func Check(ctx context.Context, o Options) ([]checks.Verdict, error) {
	sensors, err := list(o.SysRoot)
	if err != nil {
		return nil, err
	}
	var out []checks.Verdict
	for _, s := range sensors {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		out = append(out, judge(s, o))
	}
	return out, nil
}

func list(root string) ([]sensor, error) {
	class := filepath.Join(root, "sys/class/hwmon")
	entries, err := os.ReadDir(class)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // no hwmon drivers loaded: nothing to judge
	}
	if err != nil {
		return nil, fmt.Errorf("list hwmon devices: %w", err)
	}
	var out []sensor
	names := map[string]int{}
	for _, e := range entries {
		m := hwmonName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		dir := filepath.Join(class, e.Name())
		name, err := checks.ReadString(filepath.Join(dir, "name"))
		if err != nil {
			return nil, fmt.Errorf("hwmon %s: name: %w", e.Name(), err)
		}
		names[name]++
		files, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("hwmon %s (%s): %w", e.Name(), name, err)
		}
		for _, f := range files {
			tm := tempInput.FindStringSubmatch(f.Name())
			if tm == nil {
				continue
			}
			idx, _ := strconv.Atoi(tm[1])
			label, err := checks.ReadString(filepath.Join(dir, fmt.Sprintf("temp%d_label", idx)))
			if err != nil || label == "" {
				label = fmt.Sprintf("temp%d", idx)
			}
			out = append(out, sensor{hwmon: n, dir: dir, name: name, index: idx, label: label})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].hwmon != out[j].hwmon {
			return out[i].hwmon < out[j].hwmon
		}
		return out[i].index < out[j].index
	})
	for i := range out {
		if names[out[i].name] > 1 {
			out[i].name = fmt.Sprintf("%s-%d", out[i].name, out[i].hwmon)
		}
	}
	return out, nil
}

func judge(s sensor, o Options) checks.Verdict {
	comp := "hwmon/" + s.name + "/" + s.label
	attr := func(a string) string { return filepath.Join(s.dir, fmt.Sprintf("temp%d_%s", s.index, a)) }
	milli, err := checks.ReadInt(attr("input"))
	if err != nil {
		// hwmon returns EIO/ENODATA for a sensor that cannot be read now.
		return checks.Verdict{Component: comp, Status: checks.Error, Message: fmt.Sprintf("reading %s: %v", attr("input"), err)}
	}
	t := float64(milli) / 1000
	// One bar on tempC: the tightest of the sensor's own limits (less the
	// margin) and the suite's absolute bar; the sources go in Expected.
	bar := o.TempC
	var sources []string
	for _, a := range []string{"crit", "max"} {
		if a == "max" && o.IgnoreMax {
			continue
		}
		v, err := checks.ReadInt(attr(a))
		if err != nil {
			continue // the sensor does not publish this limit
		}
		limit := float64(v)/1000 - o.MarginC
		sources = append(sources, fmt.Sprintf("temp%d_%s=%s", s.index, a, checks.Num(float64(v)/1000)))
		if bar.Max == nil || limit < *bar.Max {
			bar.Max = &limit
		}
	}
	if !o.TempC.IsZero() {
		sources = append(sources, "suite bar "+o.TempC.Expr("tempC"))
	}
	rs := []checks.Reading{checks.Value("tempC", t, bar).In("C")}
	for _, a := range []string{"crit_alarm", "max_alarm"} {
		if a == "max_alarm" && o.IgnoreMax {
			continue
		}
		if v, err := checks.ReadInt(attr(a)); err == nil {
			rs = append(rs, checks.Value(a, float64(v), checks.AtMost(0)))
		}
	}
	if bar.IsZero() && len(rs) == 1 {
		return checks.Verdict{Component: comp, Status: checks.Skip, Observed: "tempC=" + checks.Num(t),
			Message: "sensor publishes no temp_crit or temp_max and the suite sets no tempC bar"}
	}
	v := checks.Judge(comp, rs...)
	if len(sources) > 0 {
		note := "from " + strings.Join(sources, ", ")
		if o.MarginC != 0 {
			note += fmt.Sprintf(", margin %s", checks.Num(o.MarginC))
		}
		v.Expected += " (" + note + ")"
	}
	return v
}

// Sensor is one hwmon temperature sensor, named as Check names it; the
// telemetry sampler reads the same sensors through it.
type Sensor struct {
	Component string // hwmon/<name>/<label>
	Chip      string // the hwmon device's name attribute (coretemp, k10temp, nvme)
	s         sensor
}

// Sensors lists every hwmon temperature sensor under root (none when no
// hwmon driver is loaded).
func Sensors(root string) ([]Sensor, error) {
	ss, err := list(root)
	if err != nil {
		return nil, err
	}
	out := make([]Sensor, len(ss))
	for i, s := range ss {
		chip, _ := checks.ReadString(filepath.Join(s.dir, "name"))
		out[i] = Sensor{Component: "hwmon/" + s.name + "/" + s.label, Chip: chip, s: s}
	}
	return out, nil
}

// Attr is the path of the sensor's temp<N>_<attr> file (input, crit, max).
func (s Sensor) Attr(attr string) string {
	return filepath.Join(s.s.dir, fmt.Sprintf("temp%d_%s", s.s.index, attr))
}
