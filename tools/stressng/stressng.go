// Package stressng reads what stress-ng reports: the --yaml file (per
// stressor its bogo-op counts and rates, and stressor-specific metrics
// such as the stream stressor's memory rates) and its log on stderr
// (failures, which --verify turns into "fail:" lines, per-instance memory
// rates, and whether the run completed successfully). It runs nothing; the
// checks build the command line. The input comes from a tool on the node,
// so both readers are bounded and fuzzed.
package stressng

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// MaxOutput bounds each of the YAML file and the log read.
const MaxOutput = 1 << 20

// Report is stress-ng's --yaml file.
type Report struct {
	Version string
	Metrics []Metric
}

// Metric is one stressor's line of the metrics table.
type Metric struct {
	Stressor string
	BogoOps  float64
	// BogoOpsPerSec is over wall-clock time (bogo-ops-per-second-real-time):
	// the throughput of all its instances together.
	BogoOpsPerSec float64
	WallClockSec  float64
	// Extra holds the stressor's own metrics by their YAML names
	// (memory-read-rate-mb-per-sec, ...).
	Extra map[string]float64
}

// Stressor returns the metrics of the named stressor.
func (r *Report) Stressor(name string) (Metric, bool) {
	for _, m := range r.Metrics {
		if m.Stressor == name {
			return m, true
		}
	}
	return Metric{}, false
}

// ParseYAML reads the --yaml file. A file without a metrics section (the
// run stopped before it measured anything) is an error.
func ParseYAML(b []byte) (*Report, error) {
	if len(b) > MaxOutput {
		return nil, fmt.Errorf("stress-ng: YAML of %d bytes is over the %d-byte bound", len(b), MaxOutput)
	}
	var doc struct {
		SystemInfo struct {
			Version string `yaml:"stress-ng-version"`
		} `yaml:"system-info"`
		Metrics []map[string]yaml.Node `yaml:"metrics"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("stress-ng: YAML: %w", err)
	}
	if len(doc.Metrics) == 0 {
		return nil, errors.New("stress-ng: the YAML has no metrics")
	}
	r := &Report{Version: doc.SystemInfo.Version}
	for i, fields := range doc.Metrics {
		m := Metric{Extra: map[string]float64{}}
		for k, n := range fields {
			if k == "stressor" {
				m.Stressor = n.Value
				continue
			}
			if n.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("stress-ng: metrics[%d].%s: not a number", i, k)
			}
			v, err := strconv.ParseFloat(n.Value, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return nil, fmt.Errorf("stress-ng: metrics[%d].%s: %q is not a non-negative number", i, k, n.Value)
			}
			switch k {
			case "bogo-ops":
				m.BogoOps = v
			case "bogo-ops-per-second-real-time":
				m.BogoOpsPerSec = v
			case "wall-clock-time":
				m.WallClockSec = v
			default:
				m.Extra[k] = v
			}
		}
		if m.Stressor == "" {
			return nil, fmt.Errorf("stress-ng: metrics[%d] names no stressor", i)
		}
		r.Metrics = append(r.Metrics, m)
	}
	return r, nil
}

// Log is what the stderr log says.
type Log struct {
	// Problems are the "fail:" lines (a --verify mismatch, a stressor
	// that failed) and "error:" lines, without the "stress-ng: " prefix.
	Problems []string
	// Successful and Unsuccessful: stress-ng's closing line ("successful
	// run completed", "unsuccessful run completed"); neither when it did
	// not get there.
	Successful, Unsuccessful bool
	// Rates are the stream stressor's per-instance memory rates.
	Rates []InstanceRate
}

// InstanceRate is one stream instance's "memory rate:" line. stress-ng's
// MB is 2^20 bytes.
type InstanceRate struct {
	Stressor              string
	Instance              int
	ReadMiBps, WriteMiBps float64
}

// ParseLog reads stress-ng's stderr. Lines it does not know are ignored
// (stress-ng's wording of informational lines changes between versions).
func ParseLog(b []byte) Log {
	if len(b) > MaxOutput {
		b = b[len(b)-MaxOutput:]
	}
	var l Log
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "stress-ng: ")
		if !ok {
			continue
		}
		level, msg, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		msg = strings.TrimSpace(msg)
		// "[pid] text": drop the pid.
		if strings.HasPrefix(msg, "[") {
			if _, after, ok := strings.Cut(msg, "] "); ok {
				msg = after
			}
		}
		switch level {
		case "fail", "error":
			l.Problems = append(l.Problems, level+": "+msg)
		case "info":
			switch {
			case strings.HasPrefix(msg, "successful run completed"):
				l.Successful = true
			case strings.HasPrefix(msg, "unsuccessful run completed"):
				l.Unsuccessful = true
			default:
				if r, ok := parseRate(msg); ok {
					l.Rates = append(l.Rates, r)
				}
			}
		}
	}
	return l
}

// parseRate reads "stream: memory rate: 2083.71 MB read/sec, 1389.14 MB
// write/sec, 182.08 Mflop/sec (instance 0)".
func parseRate(msg string) (InstanceRate, bool) {
	name, rest, ok := strings.Cut(msg, ": memory rate: ")
	if !ok {
		return InstanceRate{}, false
	}
	f := strings.Fields(rest)
	// 2083.71 MB read/sec, 1389.14 MB write/sec, ... (instance 0)
	if len(f) < 8 || f[1] != "MB" || f[2] != "read/sec," || f[4] != "MB" || f[5] != "write/sec," || f[len(f)-2] != "(instance" {
		return InstanceRate{}, false
	}
	rd, err1 := strconv.ParseFloat(f[0], 64)
	wr, err2 := strconv.ParseFloat(f[3], 64)
	inst, err3 := strconv.Atoi(strings.TrimSuffix(f[len(f)-1], ")"))
	if err1 != nil || err2 != nil || err3 != nil || !(rd >= 0) || !(wr >= 0) || math.IsInf(rd, 0) || math.IsInf(wr, 0) || inst < 0 {
		return InstanceRate{}, false
	}
	return InstanceRate{Stressor: name, Instance: inst, ReadMiBps: rd, WriteMiBps: wr}, true
}
