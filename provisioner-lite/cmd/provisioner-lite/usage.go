package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// flagGroup is one topic of the coordinator's flags in its usage.
type flagGroup struct {
	title    string
	names    []string // flags by name
	prefixes []string // and every flag whose name starts so
}

// flagGroups order the coordinator's flags by topic for -h (about 60
// flags in one list is not readable). A flag no group names falls under
// "other": grouping never hides a flag.
var flagGroups = []flagGroup{
	{title: "site: state, manifests, nodes, images", names: []string{"config", "state-dir", "manifests", "nodes", "image-dir", "image-dir-arm64", "import-artifact", "log-level", "log-format"}},
	{title: "network boot: how nodes reach the coordinator and boot CURE", names: []string{"advertise", "advertise-grpc", "pxe-interface", "proxy-dhcp",
		"proxy-dhcp-all-macs", "pxe-server-ip", "tftp-listen", "ipxe-dir", "ipxe-efi", "netboot", "boot-mode", "bind-boot-ip", "claim-settle", "boot-tokens-per-window"}},
	{title: "listeners and their limits", names: []string{"tls-name"}, prefixes: []string{"http-", "https-", "grpc-", "web-", "metrics-", "pprof-"}},
	{title: "BMCs (Redfish) and power", names: []string{"power-on-rate", "power-on-burst", "power-group-label"}, prefixes: []string{"bmc-"}},
	{title: "runs: budgets, timeouts, retries", names: []string{"wait-cure", "wait-host", "reconnect", "phase-attempts", "retry-base", "retry-max", "max-runs"}},
	{title: "store, retention, memory and several instances", names: []string{"db", "instance-id", "peer-grpc", "peer-url", "artifact-mirror", "manifests-from-store", "lease-ttl", "stats-every", "retention",
		"audit-retention", "max-run-events", "max-run-event-bytes", "max-run-verdicts", "fleet-size", "memory-limit"}},
	{title: "notifications", prefixes: []string{"webhook"}},
}

// groupOf is the title of the group f belongs to ("other" if none).
func groupOf(name string) string {
	for _, g := range flagGroups {
		for _, n := range g.names {
			if n == name {
				return g.title
			}
		}
	}
	for _, g := range flagGroups {
		for _, p := range g.prefixes {
			if strings.HasPrefix(name, p) {
				return g.title
			}
		}
	}
	return "other"
}

// printGroupedFlags writes fs's flags as Go's flag.PrintDefaults does
// (-name, which the command line takes as --name too), one titled block
// per topic.
func printGroupedFlags(w io.Writer, fs *pflag.FlagSet) {
	blocks := map[string]*strings.Builder{}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || f.Name == "version" {
			return
		}
		title := groupOf(f.Name)
		b := blocks[title]
		if b == nil {
			b = &strings.Builder{}
			blocks[title] = b
		}
		writeFlag(b, f)
	})
	titles := make([]string, 0, len(flagGroups)+1)
	for _, g := range flagGroups {
		titles = append(titles, g.title)
	}
	for _, title := range append(titles, "other") {
		if b := blocks[title]; b != nil {
			fmt.Fprintf(w, "\n%s:\n%s", title, b.String())
		}
	}
}

// writeFlag is one flag as flag.PrintDefaults writes it.
func writeFlag(b *strings.Builder, f *pflag.Flag) {
	fmt.Fprintf(b, "  -%s", f.Name)
	name, usage := pflag.UnquoteUsage(f)
	if name == "multiFlag" || name == "text" {
		name = "value"
	}
	if name != "" {
		b.WriteString(" " + name)
	}
	b.WriteString("\n    \t")
	b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
	switch {
	case f.DefValue == "" || f.DefValue == "0" || f.DefValue == "false" || f.DefValue == "0s":
	case f.Value.Type() == "string":
		fmt.Fprintf(b, " (default %q)", f.DefValue)
	default:
		fmt.Fprintf(b, " (default %v)", f.DefValue)
	}
	b.WriteString("\n")
}
