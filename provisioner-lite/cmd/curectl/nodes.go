package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/curectl"
	"github.com/cure-oss/cure/provisioner-lite/nodes"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

const nodesUsage = `usage: curectl nodes [list]
       curectl nodes show NODE
       curectl nodes add --id ID --bmc-url URL --bmc-user USER (--bmc-password-env VAR | --bmc-password-file FILE | --bmc-password-stdin)
                         [--bmc-fingerprint SHA256 | --bmc-ca-file FILE | --bmc-insecure] --mac MAC [--mac MAC...]
                         [--sku SKU] [--hostname NAME] [--serial S] [--label k=v...] [--psid SERIAL=PSID...]
       curectl nodes add -f FILE      (one node's YAML mapping, or a nodes file; refuses ids that exist)
       curectl nodes import FILE      (YAML or CSV nodes file; adds new nodes and updates existing ones)
       curectl nodes remove NODE      (refused while the node has an active run; its history stays)
       curectl nodes label NODE k=v... [k-...]`

// nodesCmd runs `curectl nodes ...`. in is stdin (--bmc-password-stdin).
func nodesCmd(ctx context.Context, c curev1.OperatorServiceClient, args []string, in io.Reader, out io.Writer) int {
	sub, rest := "list", args
	if len(args) > 0 {
		sub, rest = args[0], args[1:]
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	switch sub {
	case "list":
		if len(rest) > 0 {
			return nodesUsageErr("list takes no arguments")
		}
		resp, err := c.ListNodes(cctx, &curev1.ListNodesRequest{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "curectl nodes:", err)
			return 1
		}
		curectl.PrintNodes(out, resp.GetNodes())
		return 0
	case "show":
		if len(rest) != 1 {
			return nodesUsageErr("show takes one NODE")
		}
		d, err := c.ShowNode(cctx, &curev1.ShowNodeRequest{NodeId: rest[0]})
		if err != nil {
			fmt.Fprintln(os.Stderr, "curectl nodes show:", err)
			return 1
		}
		curectl.PrintNode(out, d)
		return 0
	case "add":
		return nodesAdd(cctx, c, rest, in, out)
	case "import":
		if len(rest) != 1 {
			return nodesUsageErr("import takes one FILE")
		}
		return sendNodes(cctx, c, rest[0], true, out)
	case "remove":
		if len(rest) != 1 {
			return nodesUsageErr("remove takes one NODE")
		}
		resp, err := c.RemoveNode(cctx, &curev1.RemoveNodeRequest{NodeId: rest[0]})
		if err != nil {
			fmt.Fprintln(os.Stderr, "curectl nodes remove:", err)
			return 1
		}
		fmt.Fprintf(out, "node %s removed (%d run(s) kept in its history)\n", resp.GetNodeId(), resp.GetRunsKept())
		return 0
	case "label":
		if len(rest) < 2 {
			return nodesUsageErr("label takes NODE and at least one k=v or k-")
		}
		set, remove, err := parseLabelArgs(rest[1:])
		if err != nil {
			fmt.Fprintln(os.Stderr, "curectl nodes label:", err)
			return 2
		}
		d, err := c.LabelNode(cctx, &curev1.LabelNodeRequest{NodeId: rest[0], Set: set, Remove: remove})
		if err != nil {
			fmt.Fprintln(os.Stderr, "curectl nodes label:", err)
			return 1
		}
		fmt.Fprintf(out, "node %s labels: %s\n", d.GetNodeId(), labelString(d.GetLabels()))
		return 0
	}
	return nodesUsageErr(fmt.Sprintf("unknown nodes command %q", sub))
}

func nodesUsageErr(msg string) int {
	fmt.Fprintf(os.Stderr, "curectl nodes: %s\n%s\n", msg, nodesUsage)
	return 2
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

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func nodesAdd(ctx context.Context, c curev1.OperatorServiceClient, args []string, in io.Reader, out io.Writer) int {
	fs := flag.NewFlagSet("nodes add", flag.ContinueOnError)
	file := fs.String("f", "", "a YAML snippet (one node's mapping) or a nodes file, instead of the flags")
	var n store.Node
	fs.StringVar(&n.ID, "id", "", "node id")
	fs.StringVar(&n.BMCURL, "bmc-url", "", "BMC Redfish URL (https://...)")
	fs.StringVar(&n.BMCUser, "bmc-user", "", "BMC user name")
	pwEnv := fs.String("bmc-password-env", "", "read the BMC password from this environment variable (here, not on the coordinator)")
	pwFile := fs.String("bmc-password-file", "", "read the BMC password from this file (mode 0600)")
	pwStdin := fs.Bool("bmc-password-stdin", false, "read the BMC password from the first line of stdin")
	fs.StringVar(&n.BMCFingerprint, "bmc-fingerprint", "", "pinned SHA-256 of the BMC's certificate")
	caFile := fs.String("bmc-ca-file", "", "PEM CA bundle that verifies the BMC (sent to the coordinator)")
	fs.BoolVar(&n.BMCInsecure, "bmc-insecure", false, "do not verify the BMC's TLS (allows http://)")
	fs.StringVar(&n.SKU, "sku", "", "SKU manifest name")
	fs.StringVar(&n.Hostname, "hostname", "", "host name of the installed OS")
	fs.StringVar(&n.SystemSerial, "serial", "", "system serial")
	var macs, labels, psids multi
	fs.Var(&macs, "mac", "MAC the node PXE-boots from (repeatable)")
	fs.Var(&labels, "label", "k=v (repeatable)")
	fs.Var(&psids, "psid", "DISKSERIAL=PSID from the drive label (repeatable)")
	if fs.Parse(args) != nil {
		return 2
	}
	if fs.NArg() > 0 {
		return nodesUsageErr(fmt.Sprintf("add: unexpected arguments %q", fs.Args()))
	}
	if *file != "" {
		if fs.NFlag() > 1 {
			return nodesUsageErr("add: -f FILE or the node's flags, not both")
		}
		return sendNodes(ctx, c, *file, false, out)
	}
	n.MACs = macs
	var err error
	if n.Labels, err = pairsArg("--label", labels); err != nil {
		fmt.Fprintln(os.Stderr, "curectl nodes add:", err)
		return 2
	}
	if n.PSIDs, err = pairsArg("--psid", psids); err != nil {
		fmt.Fprintln(os.Stderr, "curectl nodes add:", err)
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
			fmt.Fprintln(os.Stderr, "curectl nodes add: --bmc-password-stdin:", err)
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
		fmt.Fprintf(os.Stderr, "curectl nodes add: nothing was sent:\n%s\n", err)
		return 2
	}
	spec, err := specFromNode(n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "curectl nodes add:", err)
		return 2
	}
	return sendSpecs(ctx, c, []*curev1.NodeSpec{spec}, false, "curectl nodes add", out)
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
func sendNodes(ctx context.Context, c curev1.OperatorServiceClient, file string, replace bool, out io.Writer) int {
	ns, err := nodes.Load(file)
	if err != nil {
		fmt.Fprintf(os.Stderr, "curectl nodes: nothing was sent:\n%v\n", err)
		return 2
	}
	specs := make([]*curev1.NodeSpec, 0, len(ns))
	for _, n := range ns {
		s, err := specFromNode(n)
		if err != nil {
			fmt.Fprintf(os.Stderr, "curectl nodes: %s: node %s: %v (nothing was sent)\n", file, n.ID, err)
			return 2
		}
		specs = append(specs, s)
	}
	return sendSpecs(ctx, c, specs, replace, file, out)
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
	return &curev1.NodeSpec{Id: n.ID, Sku: n.SKU, Hostname: n.Hostname, Serial: n.SystemSerial, Macs: n.MACs, Labels: n.Labels, Psids: n.PSIDs, Bmc: bmc}, nil
}

func sendSpecs(ctx context.Context, c curev1.OperatorServiceClient, specs []*curev1.NodeSpec, replace bool, source string, out io.Writer) int {
	resp, err := c.AddNodes(ctx, &curev1.AddNodesRequest{Nodes: specs, Replace: replace, Source: source})
	if err != nil {
		fmt.Fprintln(os.Stderr, "curectl nodes:", err)
		return 1
	}
	if a := resp.GetAdded(); len(a) > 0 {
		fmt.Fprintf(out, "added %d: %s\n", len(a), strings.Join(a, ", "))
	}
	if u := resp.GetUpdated(); len(u) > 0 {
		fmt.Fprintf(out, "updated %d: %s\n", len(u), strings.Join(u, ", "))
	}
	return 0
}
