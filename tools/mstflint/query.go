package mstflint

import (
	"fmt"
	"regexp"
	"strings"
)

// Query is `mstflint query` output for a device or an image file.
type Query struct {
	ImageType string
	// FWVersion is the image on flash (device) or in the file (image).
	FWVersion string
	// RunningFWVersion is set only when the device runs another version
	// than the one on flash (a burn waiting for its reset).
	RunningFWVersion   string
	FWReleaseDate      string
	ProductVersion     string
	RomInfo            []RomInfo
	BaseGUID           string
	BaseMAC            string
	PSID               string
	SecurityAttributes string
	DeviceID           string
	// Fields holds every "Key: value" line as printed, continuation lines
	// joined with "\n".
	Fields map[string]string
}

// RomInfo is one expansion ROM line: "type=UEFI Virtio net version=21.4.13 cpu=AMD64,AARCH64".
type RomInfo struct {
	Type, Version, CPU string
	Extra              map[string]string // other key=value pairs (devid, proto)
}

// Running is the version the device runs now.
func (q *Query) Running() string {
	if q.RunningFWVersion != "" {
		return q.RunningFWVersion
	}
	return q.FWVersion
}

// PendingReset reports a burnt image that a reset has not loaded yet.
func (q *Query) PendingReset() bool {
	return q.RunningFWVersion != "" && q.RunningFWVersion != q.FWVersion
}

var keyLine = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9 ()/_.-]*?):\s*(.*)$`)

// interpreted are the fields ParseQuery gives meaning to. Each may appear
// once: a second "FW Version:" or "PSID:" line can only come from text
// the device supplies (a VSD string holding a newline) and must not
// override the real one.
var interpreted = map[string]bool{
	"Image type": true, "FW Version": true, "FW Version(Running)": true, "FW Release Date": true,
	"Product Version": true, "Rom Info": true, "Base GUID": true, "Base MAC": true,
	"PSID": true, "Security Attributes": true, "Device ID": true,
}

// ParseQuery decodes `mstflint query` output. It requires FW Version and
// PSID: without them the output is not a query (an error message, or a
// format this parser does not know).
func ParseQuery(out []byte) (*Query, error) {
	q := &Query{Fields: map[string]string{}}
	// Values come from the adapter's flash: keep them UTF-8 for protobuf.
	text := strings.ToValidUTF8(string(out), "\uFFFD")
	values := map[string][]string{} // continuation lines appended, joined at the end
	firstLine := map[string]int{}
	var last string
	n := 0
	for raw := range strings.Lines(text) {
		n++
		line := strings.TrimRight(raw, " \t\r\n")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if last == "" {
				return nil, fmt.Errorf("mstflint query output line %d: continuation %q before any field", n, strings.TrimSpace(line))
			}
			values[last] = append(values[last], strings.TrimSpace(line))
			continue
		}
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			// "-W- ..." warnings and the like carry no field.
			last = ""
			continue
		}
		last = m[1]
		if prev, ok := firstLine[last]; ok && interpreted[last] {
			return nil, fmt.Errorf("mstflint query output line %d: field %q appears again (first on line %d): refusing to pick one", n, last, prev)
		}
		firstLine[last] = n
		values[last] = []string{m[2]}
	}
	for k, v := range values {
		q.Fields[k] = strings.Join(v, "\n")
	}
	first := func(k string) string {
		f := strings.Fields(q.Fields[k])
		if len(f) == 0 || f[0] == "N/A" {
			return ""
		}
		return f[0]
	}
	q.ImageType = strings.TrimSpace(q.Fields["Image type"])
	q.FWVersion = first("FW Version")
	q.RunningFWVersion = first("FW Version(Running)")
	q.FWReleaseDate = first("FW Release Date")
	q.ProductVersion = first("Product Version")
	q.BaseGUID = first("Base GUID")
	q.BaseMAC = first("Base MAC")
	q.PSID = first("PSID")
	q.DeviceID = first("Device ID")
	q.SecurityAttributes = strings.TrimSpace(q.Fields["Security Attributes"])
	if ri := q.Fields["Rom Info"]; ri != "" {
		for _, l := range strings.Split(ri, "\n") {
			r, err := parseRom(l)
			if err != nil {
				return nil, err
			}
			q.RomInfo = append(q.RomInfo, r)
		}
	}
	switch {
	case q.FWVersion == "" && q.RunningFWVersion == "":
		return nil, fmt.Errorf("mstflint query output has no \"FW Version:\" line: %s", snippet(out))
	case q.PSID == "":
		return nil, fmt.Errorf("mstflint query output has no \"PSID:\" line: %s", snippet(out))
	}
	if q.FWVersion == "" {
		// Old flint prints only "FW Version(Running)" when flash is unreadable.
		q.FWVersion = q.RunningFWVersion
	}
	return q, nil
}

var romKey = regexp.MustCompile(`(?:^|\s)([a-z]+)=`)

// parseRom splits "type=UEFI Virtio net version=21.4.13 cpu=AMD64": a
// value runs until the next " key=", so types with spaces survive.
func parseRom(l string) (RomInfo, error) {
	idx := romKey.FindAllStringSubmatchIndex(l, -1)
	if len(idx) == 0 {
		return RomInfo{}, fmt.Errorf("mstflint query: Rom Info line %q has no key=value pairs", l)
	}
	r := RomInfo{}
	for i, m := range idx {
		key := l[m[2]:m[3]]
		end := len(l)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		val := strings.TrimSpace(l[m[1]:end])
		switch key {
		case "type":
			r.Type = val
		case "version":
			r.Version = val
		case "cpu":
			r.CPU = val
		default:
			if r.Extra == nil {
				r.Extra = map[string]string{}
			}
			r.Extra[key] = val
		}
	}
	return r, nil
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	if s == "" {
		return "(empty)"
	}
	return fmt.Sprintf("%q", s)
}
