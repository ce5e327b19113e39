package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/nodes"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"github.com/spf13/cobra"
)

// Enlistment (provisioner-lite --enlist, docs/SITE.md): machines whose MAC
// no node has reported what they are; an admin approves one into a node.

func (a *app) discoveredCmd() *cobra.Command {
	var output string
	var all bool
	cmd := &cobra.Command{
		Use:   "discovered",
		Short: "List the machines that enlisted (provisioner-lite --enlist), with the SKU and name their inspection proposes",
		Long: `List the machines that enlisted (provisioner-lite --enlist): each unknown MAC
that network-booted, what its inspection reported (system, serial, the BMC
address from SMBIOS type 42, drives that want their PSID), and the SKU and
node name the manifests' spec.inspection rules propose. --all shows the
approved ones too.

Exit codes:
  0  listed (none discovered included)
  1  failed: the coordinator refused the request, could not be reached, or enlistment is off there
  2  bad usage (flags, arguments)`,
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			format, err := parseOutput(output)
			if err != nil {
				return err
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				return discoveredList(ctx, c, all, format, a.out)
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "the approved machines too")
	addOutputFlag(cmd, &output, outTable, outJSON, outYAML)
	return cmd
}

func discoveredList(ctx context.Context, c curev1.OperatorServiceClient, all bool, format string, out io.Writer) int {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := c.ListDiscovered(cctx, &curev1.ListDiscoveredRequest{All: all})
	if err != nil {
		fmt.Fprintln(stderr(), "curectl nodes discovered:", err)
		return 1
	}
	if structuredFormat(format) {
		return printStructured(resp, format, out)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tMAC\tSTATE\tSERIAL\tBMC\tPSID DRIVES\tPROPOSED SKU\tPROPOSED NAME")
	for _, d := range resp.GetDiscovered() {
		rep := d.GetReport()
		bmc := "-"
		for _, h := range rep.GetBmc() {
			if h.GetBmcIp() != "" {
				bmc = h.GetBmcIp()
				break
			}
		}
		psid := 0
		for _, dr := range rep.GetDrives() {
			if dr.GetPsidRevert() {
				psid++
			}
		}
		state := d.GetState()
		if d.GetNodeId() != "" {
			state += " (" + d.GetNodeId() + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", d.GetId(), d.GetMac(), textsafe.BoundedLine(state, 80),
			dash(textsafe.BoundedLine(rep.GetInventory().GetSystem().GetSerial(), 64)), bmc, psid, dash(d.GetProposedSku()), dash(d.GetProposedName()))
	}
	_ = tw.Flush()
	fmt.Fprintf(out, "%d discovered (the coordinator keeps at most %d not yet approved)\n", len(resp.GetDiscovered()), resp.GetCap())
	return 0
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

type approveOpts struct {
	cred, url, fingerprint, caFile, sku, name, output string
	insecure                                          bool
	psids                                             []string
}

func (a *app) approveCmd() *cobra.Command {
	var o approveOpts
	cmd := &cobra.Command{
		Use:   "approve ID --bmc-cred USER:SOURCE [--sku SKU] [--name NODE]",
		Short: "Turn a discovered machine into a node (admin; audited); the normal admission applies from there",
		Long: `Turn a discovered machine into a node, as nodes add would add it: its id and
SKU are the inspection's proposal unless --name and --sku say otherwise, its
MAC the one that booted, its serial the one it reported, its BMC URL the
address of its SMBIOS type 42 record unless --bmc-url says otherwise. The
BMC credentials are yours: --bmc-cred USER:env:VAR, USER:file:PATH or
USER:stdin (read here, sent over TLS; never on the command line). Drives
that want a PSID: --psid SERIAL=PSID from their labels. Needs role admin.

Exit codes:
  0  approved: the node exists
  1  failed: refused (no such machine, approved already, a check of the node failed, not admin) or unreachable
  2  bad usage (flags, arguments)`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			format, err := parseOutput(o.output)
			if err != nil {
				return err
			}
			o.output = format
			spec, err := o.spec(a.in)
			if err != nil {
				fmt.Fprintln(stderr(), "curectl nodes approve:", err)
				a.rc = 2
				return errDone
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				return approve(ctx, c, args[0], spec, o.output, a.out)
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.cred, "bmc-cred", "", "BMC user and where its password is: USER:env:VAR, USER:file:PATH or USER:stdin (required)")
	fs.StringVar(&o.url, "bmc-url", "", "BMC Redfish URL (default: from the machine's SMBIOS type 42 record)")
	fs.StringVar(&o.fingerprint, "bmc-fingerprint", "", "pinned SHA-256 of the BMC's certificate")
	fs.StringVar(&o.caFile, "bmc-ca-file", "", "PEM CA bundle that verifies the BMC (sent to the coordinator)")
	fs.BoolVar(&o.insecure, "bmc-insecure", false, "do not verify the BMC's TLS (allows http://)")
	fs.StringVar(&o.sku, "sku", "", "SKU manifest name (default: the proposal)")
	fs.StringVar(&o.name, "name", "", "node id (default: the proposal)")
	fs.StringArrayVar(&o.psids, "psid", nil, "DISKSERIAL=PSID from the drive label (repeatable)")
	addOutputFlag(cmd, &o.output, outTable, outJSON, outYAML)
	_ = cmd.RegisterFlagCompletionFunc("sku", a.completeSKUs)
	return cmd
}

// spec is the node the flags describe, the password read here.
func (o approveOpts) spec(in io.Reader) (*curev1.NodeSpec, error) {
	user, src, ok := strings.Cut(o.cred, ":")
	if o.cred == "" || !ok || user == "" {
		return nil, errors.New("--bmc-cred USER:env:VAR, USER:file:PATH or USER:stdin is required")
	}
	var pw string
	kind, arg, _ := strings.Cut(src, ":")
	switch kind {
	case "env":
		v, set := os.LookupEnv(arg)
		if arg == "" || !set {
			return nil, fmt.Errorf("--bmc-cred: environment variable %q is not set", arg)
		}
		pw = v
	case "file":
		p, err := nodes.ResolvePassword(store.Node{ID: "approve", BMCPasswordRef: nodes.RefFile + arg})
		if err != nil {
			return nil, fmt.Errorf("--bmc-cred: %w", err)
		}
		pw = p
	case "stdin":
		line, err := bufio.NewReader(in).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("--bmc-cred: stdin: %w", err)
		}
		pw = strings.TrimRight(line, "\r\n")
	default:
		return nil, fmt.Errorf("--bmc-cred %s:%s: want env:VAR, file:PATH or stdin after the user", user, kind)
	}
	psids, err := pairsArg("--psid", o.psids)
	if err != nil {
		return nil, err
	}
	bmc := &curev1.BMCSpec{Url: o.url, Username: user, Password: pw, Fingerprint: o.fingerprint, Insecure: o.insecure}
	if o.caFile != "" {
		b, err := os.ReadFile(o.caFile)
		if err != nil {
			return nil, fmt.Errorf("--bmc-ca-file: %w", err)
		}
		bmc.CaPem = b
	}
	return &curev1.NodeSpec{Id: o.name, Sku: o.sku, Bmc: bmc, Psids: psids}, nil
}

func approve(ctx context.Context, c curev1.OperatorServiceClient, id string, spec *curev1.NodeSpec, format string, out io.Writer) int {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := c.ApproveDiscovered(cctx, &curev1.ApproveDiscoveredRequest{Id: id, Node: spec})
	if err != nil {
		fmt.Fprintln(stderr(), "curectl nodes approve:", err)
		return 1
	}
	if structuredFormat(format) {
		return printStructured(resp, format, out)
	}
	fmt.Fprintf(out, "approved %s as node %s (SKU %s, BMC %s): provision it as any node\n", id, resp.GetNodeId(), resp.GetSku(), resp.GetBmcUrl())
	return 0
}
