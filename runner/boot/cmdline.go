// Package boot holds the init-time steps of a CURE node: reading the kernel
// command line, mounting pseudo filesystems, loading kernel modules for the
// devices present (there is no udev) and bringing the network up with DHCP.
// It is a plain library so the test host OS's init can reuse it.
package boot

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Cmdline is the subset of the kernel command line CURE reads, plus every
// key=value pair for callers that want something else.
type Cmdline struct {
	Coordinator string // cure.coordinator=HOST:PORT (gRPC)
	Token       string // cure.token= per-boot token
	Node        string // cure.node= node id as the coordinator named it
	HTTP        string // cure.http=http://HOST:PORT artifact/boot server
	Debug       bool   // cure.debug=1: debug shell on fatal errors
	// Boot is cure.boot=: "https" in the signed image, whose fixed command
	// line cannot carry per-boot parameters: they come over HTTPS
	// (FetchBootParams) before Validate applies.
	Boot string
	// Mode is cure.mode=: "inspect" for an enlisting machine (its MAC is
	// in no node's inventory): it reports what it is with the discovery
	// token Enlist (cure.enlist=) and writes nothing; "" otherwise.
	Mode, Enlist string
	// Params holds every parameter; a bare flag maps to "".
	Params map[string]string
}

// ParseCmdline parses a kernel command line. Values may be double-quoted
// (the kernel allows `key="a b"`); the quotes are removed.
func ParseCmdline(s string) Cmdline {
	c := Cmdline{Params: map[string]string{}}
	for _, f := range splitCmdline(s) {
		k, v, _ := strings.Cut(f, "=")
		v = strings.ReplaceAll(v, `"`, "")
		c.Params[k] = v
		switch k {
		case "cure.coordinator":
			c.Coordinator = v
		case "cure.token":
			c.Token = v
		case "cure.node":
			c.Node = v
		case "cure.http":
			c.HTTP = strings.TrimRight(v, "/")
		case "cure.boot":
			c.Boot = v
		case "cure.mode":
			c.Mode = v
		case "cure.enlist":
			c.Enlist = v
		case "cure.debug":
			c.Debug = v == "1" || v == "true" || v == "yes"
		}
	}
	return c
}

// Inspect says whether this boot is an enlisting machine's inspection.
func (c Cmdline) Inspect() bool { return c.Mode == "inspect" }

// splitCmdline splits on whitespace outside double quotes, like the kernel's
// next_arg().
func splitCmdline(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote := false
	for _, r := range s {
		switch {
		case r == '"':
			inQuote = !inQuote
			cur.WriteRune(r)
		case !inQuote && (r == ' ' || r == '\t' || r == '\n' || r == '\r'):
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// ReadCmdline reads and parses <procRoot>/cmdline.
func ReadCmdline(procRoot string) (Cmdline, error) {
	p := filepath.Join(procRoot, "cmdline")
	b, err := os.ReadFile(p)
	if err != nil {
		return Cmdline{}, fmt.Errorf("reading kernel command line %s: %w", p, err)
	}
	return ParseCmdline(string(b)), nil
}

// HTTPSBoot says the per-boot parameters are still to be fetched.
func (c Cmdline) HTTPSBoot() bool { return c.Boot == "https" && c.Token == "" }

// Validate reports the first missing parameter the runner cannot work
// without; a signed image's command line (cure.boot=https) has none yet.
func (c Cmdline) Validate() error {
	if c.Boot != "" && c.Boot != "https" {
		return fmt.Errorf("kernel command line: cure.boot=%q: want https", c.Boot)
	}
	if c.HTTPSBoot() {
		return nil
	}
	var missing []string
	if c.Coordinator == "" {
		missing = append(missing, "cure.coordinator=HOST:PORT")
	}
	switch {
	case c.Mode != "" && c.Mode != "inspect":
		return fmt.Errorf("kernel command line: cure.mode=%q: want inspect or nothing", c.Mode)
	case c.Inspect() && c.Enlist == "":
		missing = append(missing, "cure.enlist=")
	case !c.Inspect() && c.Token == "":
		missing = append(missing, "cure.token=")
	}
	if len(missing) > 0 {
		return fmt.Errorf("kernel command line lacks %s", strings.Join(missing, ", "))
	}
	if !strings.Contains(c.Coordinator, ":") {
		return fmt.Errorf("kernel command line: cure.coordinator=%q: expected HOST:PORT", c.Coordinator)
	}
	return nil
}
