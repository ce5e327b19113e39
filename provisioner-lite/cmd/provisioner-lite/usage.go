package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
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
	{title: "site: state, manifests, nodes, images", names: []string{"state-dir", "manifests", "nodes", "image-dir", "import-artifact", "log-level"}},
	{title: "network boot: how nodes reach the coordinator and boot CURE", names: []string{"advertise", "advertise-grpc", "pxe-interface", "proxy-dhcp",
		"proxy-dhcp-all-macs", "pxe-server-ip", "tftp-listen", "ipxe-dir", "ipxe-efi", "netboot", "boot-mode", "bind-boot-ip", "claim-settle", "boot-tokens-per-window"}},
	{title: "listeners and their limits", names: []string{"tls-name"}, prefixes: []string{"http-", "https-", "grpc-", "web-", "metrics-", "pprof-"}},
	{title: "BMCs (Redfish) and power", names: []string{"power-on-rate", "power-on-burst", "power-group-label"}, prefixes: []string{"bmc-"}},
	{title: "runs: budgets, timeouts, retries", names: []string{"wait-cure", "wait-host", "reconnect", "phase-attempts", "retry-base", "retry-max", "max-runs"}},
	{title: "store, retention and several instances", names: []string{"db", "instance-id", "peer-grpc", "lease-ttl", "stats-every", "retention",
		"audit-retention", "max-run-events", "max-run-event-bytes", "max-run-verdicts"}},
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

// printGroupedFlags writes fs's flags as flag.PrintDefaults does, one
// titled block per topic.
func printGroupedFlags(w io.Writer, fs *flag.FlagSet) {
	sets := map[string]*flag.FlagSet{}
	fs.VisitAll(func(f *flag.Flag) {
		title := groupOf(f.Name)
		g := sets[title]
		if g == nil {
			g = flag.NewFlagSet(title, flag.ContinueOnError)
			g.SetOutput(w)
			sets[title] = g
		}
		g.Var(f.Value, f.Name, f.Usage)
		g.Lookup(f.Name).DefValue = f.DefValue // the default, not a value parsed before -h
	})
	titles := make([]string, 0, len(flagGroups)+1)
	for _, g := range flagGroups {
		titles = append(titles, g.title)
	}
	for _, title := range append(titles, "other") {
		if g := sets[title]; g != nil {
			fmt.Fprintf(w, "\n%s:\n", title)
			g.PrintDefaults()
		}
	}
}
