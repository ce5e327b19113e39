package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/nodes"
	"github.com/cure-oss/cure/provisioner-lite/render"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// nodesCmd is `curectl nodes ...`; without a subcommand it lists.
func (a *app) nodesCmd() *cobra.Command {
	var output string
	list := func(_ *cobra.Command, _ []string) error {
		format, err := parseOutput(output)
		if err != nil {
			return err
		}
		return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int { return nodesList(ctx, c, format, a.out) })
	}
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "List, show, add, import, remove and label nodes; drain, revalidate and return them (default: list)",
		Args:  cobra.NoArgs,
		RunE:  list,
	}
	addOutputFlag(cmd, &output, outTable, outJSON, outYAML)
	listCmd := &cobra.Command{Use: "list", Short: "List the nodes", Args: cobra.NoArgs, RunE: list}
	addOutputFlag(listCmd, &output, outTable, outJSON, outYAML)

	var showOutput string
	show := &cobra.Command{
		Use:               "show NODE",
		Short:             "Show one node: inventory entry (secrets only as where they come from), latest run, hardware",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeNodes(1),
		RunE: func(_ *cobra.Command, args []string) error {
			format, err := parseOutput(showOutput)
			if err != nil {
				return err
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				return nodesShow(ctx, c, args[0], format, a.out)
			})
		},
	}
	addOutputFlag(show, &showOutput, outTable, outJSON, outYAML)

	var importOutput string
	importCmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Add new nodes and update existing ones from a YAML or CSV nodes file",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			format, err := parseOutput(importOutput)
			if err != nil {
				return err
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				return sendNodes(cctx, c, args[0], true, format, a.out)
			})
		},
	}
	addOutputFlag(importCmd, &importOutput, outTable, outJSON, outYAML)
	var removeOutput string
	remove := &cobra.Command{
		Use:               "remove NODE",
		Short:             "Remove a node (refused while it has an active run; its history stays)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeNodes(1),
		RunE: func(_ *cobra.Command, args []string) error {
			format, err := parseOutput(removeOutput)
			if err != nil {
				return err
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				return nodesRemove(ctx, c, args[0], format, a.out)
			})
		},
	}
	addOutputFlag(remove, &removeOutput, outTable, outJSON, outYAML)
	cmd.AddCommand(listCmd, show, a.nodesAddCmd(), importCmd, remove, a.nodesLabelCmd(), a.acceptMeasurementsCmd(), a.nodesBootOSCmd())
	cmd.AddCommand(a.poolCmds()...)
	cmd.AddCommand(a.discoveredCmd(), a.approveCmd())
	return cmd
}

func (a *app) nodesLabelCmd() *cobra.Command {
	var output string
	label := &cobra.Command{
		Use:               "label NODE k=v... [k-...]",
		Short:             "Set (k=v) and remove (k-) a node's labels",
		Args:              cobra.MinimumNArgs(2),
		ValidArgsFunction: a.completeNodes(1),
		RunE: func(_ *cobra.Command, args []string) error {
			format, err := parseOutput(output)
			if err != nil {
				return err
			}
			set, rm, err := parseLabelArgs(args[1:])
			if err != nil {
				fmt.Fprintln(stderr(), "curectl nodes label:", err)
				a.rc = 2
				return errDone
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				return nodesLabel(ctx, c, args[0], set, rm, format, a.out)
			})
		},
	}
	addOutputFlag(label, &output, outTable, outJSON, outYAML)
	return label
}

func nodesList(ctx context.Context, c curev1.OperatorServiceClient, format string, out io.Writer) int {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	resp, err := c.ListNodes(cctx, &curev1.ListNodesRequest{})
	if err != nil {
		fmt.Fprintln(stderr(), "curectl nodes:", err)
		return 1
	}
	if format == outJSON || format == outYAML {
		return printStructured(resp, format, out)
	}
	// The table already has every field of a node's list entry: wide is it.
	render.PrintNodes(out, resp.GetNodes())
	return 0
}

func nodesShow(ctx context.Context, c curev1.OperatorServiceClient, node, format string, out io.Writer) int {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	d, err := c.ShowNode(cctx, &curev1.ShowNodeRequest{NodeId: node})
	if err != nil {
		fmt.Fprintln(stderr(), "curectl nodes show:", err)
		return 1
	}
	if format == outJSON || format == outYAML {
		return printStructured(d, format, out)
	}
	render.PrintNode(out, d)
	return 0
}

func nodesRemove(ctx context.Context, c curev1.OperatorServiceClient, node, format string, out io.Writer) int {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	resp, err := c.RemoveNode(cctx, &curev1.RemoveNodeRequest{NodeId: node})
	if err != nil {
		fmt.Fprintln(stderr(), "curectl nodes remove:", err)
		return 1
	}
	if structuredFormat(format) {
		return printStructured(resp, format, out)
	}
	fmt.Fprintf(out, "node %s removed (%d run(s) kept in its history)\n", resp.GetNodeId(), resp.GetRunsKept())
	return 0
}

func nodesLabel(ctx context.Context, c curev1.OperatorServiceClient, node string, set map[string]string, remove []string, format string, out io.Writer) int {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	d, err := c.LabelNode(cctx, &curev1.LabelNodeRequest{NodeId: node, Set: set, Remove: remove})
	if err != nil {
		fmt.Fprintln(stderr(), "curectl nodes label:", err)
		return 1
	}
	if structuredFormat(format) {
		return printStructured(d, format, out)
	}
	fmt.Fprintf(out, "node %s labels: %s\n", d.GetNodeId(), labelString(d.GetLabels()))
	return 0
}

// parseLabelArgs reads k=v (set) and k- (remove), checked as the inventory
// checks labels.
func parseLabelArgs(args []string) (map[string]string, []string, error) {
	set := map[string]string{}
	var remove []string
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			if err := nodes.CheckLabel(k, v); err != nil {
				return nil, nil, err
			}
			set[k] = v
			continue
		}
		if k, ok := strings.CutSuffix(a, "-"); ok && k != "" {
			remove = append(remove, k)
			continue
		}
		return nil, nil, fmt.Errorf("%q: want k=v to set a label or k- to remove one", a)
	}
	return set, remove, nil
}

func labelString(m map[string]string) string {
	if len(m) == 0 {
		return "(none)"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

// addOpts are the flags of `nodes add`.
type addOpts struct {
	file                  string
	n                     store.Node
	pwEnv, pwFile, caFile string
	pwStdin               bool
	macs, labels, psids   []string
	nodeFlagsGiven        bool
	output                string
}

func (a *app) nodesAddCmd() *cobra.Command {
	var o addOpts
	cmd := &cobra.Command{
		Use:   "add (--id ID --bmc-url URL --bmc-user USER PASSWORD-SOURCE --mac MAC... | -f FILE)",
		Short: "Add one node from flags, or the nodes of a YAML snippet or nodes file (refuses ids that exist)",
		Long: `Add one node from flags, or with -f the nodes of a YAML snippet (one node's
mapping) or a nodes file. Exactly one password source: --bmc-password-env VAR,
--bmc-password-file FILE or --bmc-password-stdin (read here, sent over TLS).
BMC TLS: --bmc-fingerprint SHA256, --bmc-ca-file FILE or --bmc-insecure.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := parseOutput(o.output)
			if err != nil {
				return err
			}
			o.output = format
			cmd.Flags().Visit(func(f *pflag.Flag) {
				if f.Name != "f" && f.Name != "output" && cmd.LocalNonPersistentFlags().Lookup(f.Name) != nil {
					o.nodeFlagsGiven = true
				}
			})
			if o.file != "" && o.nodeFlagsGiven {
				a.rc = nodesUsageErr("add: -f FILE or the node's flags, not both")
				return errDone
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				return nodesAdd(cctx, c, o, a.in, a.out)
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&o.file, "f", "f", "", "a YAML snippet (one node's mapping) or a nodes file, instead of the flags")
	fs.StringVar(&o.n.ID, "id", "", "node id")
	fs.StringVar(&o.n.BMCURL, "bmc-url", "", "BMC Redfish URL (https://...)")
	fs.StringVar(&o.n.BMCUser, "bmc-user", "", "BMC user name")
	fs.StringVar(&o.pwEnv, "bmc-password-env", "", "read the BMC password from this environment variable (here, not on the coordinator)")
	fs.StringVar(&o.pwFile, "bmc-password-file", "", "read the BMC password from this file (mode 0600)")
	fs.BoolVar(&o.pwStdin, "bmc-password-stdin", false, "read the BMC password from the first line of stdin")
	fs.StringVar(&o.n.BMCFingerprint, "bmc-fingerprint", "", "pinned SHA-256 of the BMC's certificate")
	fs.StringVar(&o.caFile, "bmc-ca-file", "", "PEM CA bundle that verifies the BMC (sent to the coordinator)")
	fs.BoolVar(&o.n.BMCInsecure, "bmc-insecure", false, "do not verify the BMC's TLS (allows http://)")
	fs.StringVar(&o.n.SKU, "sku", "", "SKU manifest name")
	fs.StringVar(&o.n.Hostname, "hostname", "", "host name of the installed OS")
	fs.StringVar(&o.n.SystemSerial, "serial", "", "system serial")
	fs.StringArrayVar(&o.macs, "mac", nil, "MAC the node PXE-boots from (repeatable)")
	fs.StringArrayVar(&o.labels, "label", nil, "k=v (repeatable)")
	fs.StringArrayVar(&o.psids, "psid", nil, "DISKSERIAL=PSID from the drive label (repeatable)")
	addOutputFlag(cmd, &o.output, outTable, outJSON, outYAML)
	_ = cmd.RegisterFlagCompletionFunc("sku", a.completeSKUs)
	return cmd
}

func nodesAdd(ctx context.Context, c curev1.OperatorServiceClient, o addOpts, in io.Reader, out io.Writer) int {
	if o.file != "" {
		if o.nodeFlagsGiven {
			return nodesUsageErr("add: -f FILE or the node's flags, not both")
		}
		return sendNodes(ctx, c, o.file, false, o.output, out)
	}
	n := o.n
	pwEnv, pwFile, pwStdin, caFile := &o.pwEnv, &o.pwFile, &o.pwStdin, &o.caFile
	macs, labels, psids := o.macs, o.labels, o.psids
	n.MACs = macs
	var err error
	if n.Labels, err = pairsArg("--label", labels); err != nil {
		fmt.Fprintln(stderr(), "curectl nodes add:", err)
		return 2
	}
	if n.PSIDs, err = pairsArg("--psid", psids); err != nil {
		fmt.Fprintln(stderr(), "curectl nodes add:", err)
		return 2
	}
	given := 0
	for _, g := range []bool{*pwEnv != "", *pwFile != "", *pwStdin} {
		if g {
			given++
		}
	}
	if given != 1 {
		return nodesUsageErr("add: give exactly one of --bmc-password-env, --bmc-password-file, --bmc-password-stdin")
	}
	switch {
	case *pwEnv != "":
		n.BMCPasswordRef = nodes.RefEnv + *pwEnv
	case *pwFile != "":
		abs, _ := filepath.Abs(*pwFile)
		n.BMCPasswordRef = nodes.RefFile + abs
	default:
		line, err := bufio.NewReader(in).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			fmt.Fprintln(stderr(), "curectl nodes add: --bmc-password-stdin:", err)
			return 1
		}
		n.BMCPassword = strings.TrimRight(line, "\r\n")
	}
	if *caFile != "" {
		abs, _ := filepath.Abs(*caFile)
		n.BMCCAFile = abs
	}
	// The same rules as the inventory file, here first so a typo is caught
	// before anything is sent; the coordinator checks again (and the SKU).
	if err := nodes.Check(&n); err != nil {
		fmt.Fprintf(stderr(), "curectl nodes add: nothing was sent:\n%s\n", boundedProblems(err, ""))
		return 2
	}
	spec, err := specFromNode(n)
	if err != nil {
		fmt.Fprintln(stderr(), "curectl nodes add:", err)
		return 2
	}
	return sendSpecs(ctx, c, []*curev1.NodeSpec{spec}, false, "curectl nodes add", o.output, out)
}

func pairsArg(flagName string, vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q: want key=value", flagName, v)
		}
		m[k] = val
	}
	return m, nil
}

// sendNodes reads a nodes file (or snippet) with the coordinator's own
// parser and sends it.
func sendNodes(ctx context.Context, c curev1.OperatorServiceClient, file string, replace bool, format string, out io.Writer) int {
	ns, err := nodes.Load(file)
	if err != nil {
		fmt.Fprintf(stderr(), "curectl nodes: nothing was sent:\n%s\n", boundedProblems(err, file))
		return 2
	}
	specs := make([]*curev1.NodeSpec, 0, len(ns))
	for _, n := range ns {
		s, err := specFromNode(n)
		if err != nil {
			fmt.Fprintf(stderr(), "curectl nodes: %s: node %s: %v (nothing was sent)\n", file, n.ID, err)
			return 2
		}
		specs = append(specs, s)
	}
	return sendSpecs(ctx, c, specs, replace, file, format, out)
}

// specFromNode is what the API takes: literal secrets. A passwordEnv or
// passwordFile is read here, on the operator's side (the coordinator does
// not read files or variables for a remote caller), and a CA file is sent
// as its contents.
func specFromNode(n store.Node) (*curev1.NodeSpec, error) {
	pw, err := nodes.ResolvePassword(n)
	if err != nil {
		return nil, err
	}
	bmc := &curev1.BMCSpec{Url: n.BMCURL, Username: n.BMCUser, Password: pw, Fingerprint: n.BMCFingerprint, Insecure: n.BMCInsecure}
	if n.BMCCAFile != "" {
		b, err := os.ReadFile(n.BMCCAFile)
		if err != nil {
			return nil, fmt.Errorf("bmc.caFile: %w", err)
		}
		if _, err := nodes.ParseCABundle(n.BMCCAFile, b); err != nil {
			return nil, fmt.Errorf("bmc.caFile: %w", err)
		}
		bmc.CaPem = b
	}
	return &curev1.NodeSpec{Id: n.ID, Sku: n.SKU, Hostname: n.Hostname, Serial: n.SystemSerial, Macs: n.MACs, Labels: n.Labels, Psids: n.PSIDs, Bmc: bmc, EkSha256: n.EKSHA256,
		Cabling: nodes.CablingProto(n.Cabling)}, nil
}

func sendSpecs(ctx context.Context, c curev1.OperatorServiceClient, specs []*curev1.NodeSpec, replace bool, source, format string, out io.Writer) int {
	resp, err := c.AddNodes(ctx, &curev1.AddNodesRequest{Nodes: specs, Replace: replace, Source: source})
	if err != nil {
		fmt.Fprintln(stderr(), "curectl nodes:", err)
		return 1
	}
	if structuredFormat(format) {
		return printStructured(resp, format, out)
	}
	if a := resp.GetAdded(); len(a) > 0 {
		fmt.Fprintf(out, "added %d: %s\n", len(a), strings.Join(a, ", "))
	}
	if u := resp.GetUpdated(); len(u) > 0 {
		fmt.Fprintf(out, "updated %d: %s\n", len(u), strings.Join(u, ", "))
	}
	return 0
}

// maxProblems bounds the problems curectl lists of a nodes file (the
// coordinator's own check lists them all).
const maxProblems = 50

// boundedProblems is a parser's error (one problem a line) cut to its
// first maxProblems lines, saying how many there were and where all of
// them are listed.
func boundedProblems(err error, file string) string {
	lines := strings.Split(strings.TrimRight(err.Error(), "\n"), "\n")
	if len(lines) <= maxProblems {
		return err.Error()
	}
	out := fmt.Sprintf("%d problem(s):\n%s", len(lines), textsafe.JoinFirst(lines, maxProblems, 1024, "\n"))
	if file != "" {
		out += "\n(provisioner-lite check --nodes " + file + " lists them all)"
	}
	return out
}

func nodesUsageErr(msg string) int {
	fmt.Fprintf(stderr(), "curectl nodes: %s (see `curectl nodes add --help`)\n", msg)
	return 2
}
