package metrics

import "strings"

// vendors are the BMC vendors given a label value of their own; anything
// else is "other". The BMC writes its service root's Vendor (or the
// system's Manufacturer) itself, so the label must not take it verbatim.
var vendors = []struct{ prefix, label string }{
	{"dell", "dell"},
	{"hpe", "hpe"},
	{"hewlett packard", "hpe"},
	{"hp", "hpe"},
	{"lenovo", "lenovo"},
	{"supermicro", "supermicro"},
	{"super micro", "supermicro"},
	{"nvidia", "nvidia"},
	{"ami", "ami"},
	{"american megatrends", "ami"},
	{"gigabyte", "gigabyte"},
	{"giga computing", "gigabyte"},
	{"quanta", "quanta"},
	{"inspur", "inspur"},
	{"asrock", "asrockrack"},
	{"cisco", "cisco"},
	{"fujitsu", "fujitsu"},
	{"intel", "intel"},
	{"wiwynn", "wiwynn"},
	{"foxconn", "foxconn"},
	{"openbmc", "openbmc"},
	{"cure", "cure"}, // the virtual BMC of the QEMU tests and the fleet simulator
}

// Vendor folds what a BMC calls its vendor into a bounded label value.
func Vendor(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return "unknown"
	}
	for _, v := range vendors {
		if s == v.prefix || strings.HasPrefix(s, v.prefix+" ") || strings.HasPrefix(s, v.prefix+",") ||
			(len(v.prefix) > 3 && strings.HasPrefix(s, v.prefix)) {
			return v.label
		}
	}
	return "other"
}
