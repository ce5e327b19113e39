// Command curectl is the operator CLI of provisioner-lite. It authenticates
// with an operator client certificate (`provisioner-lite pki --operator NAME`);
// without --cert/--key it uses operators/operator.pem (else admin.pem) beside the CA file.
//
//	curectl provision [--mode provision] [--manifest sku] [--resume] [--watch] [--yes] [--selector k=v,...] [NODE...]
//	curectl cancel [--selector k=v,...] [--run RUN] [--reason TEXT] [NODE...]
//	curectl watch NODE...|--run RUN|--selector k=v,...|--fleet
//	curectl report [-o json] [--html FILE] NODE|--run RUN
//	curectl nodes [list|show NODE|add ...|import FILE|remove NODE|label NODE k=v... k-...]
//	curectl nodes drain|drained|return [--reason TEXT] [--selector k=v,...] [NODE...]
//	curectl nodes revalidate --suite SUITE [--mode diagnostic|burnin] [--return] [NODE...]
//	curectl audit-log [--kind operator|security] [--node NODE] [--limit N] [-o json|yaml|wide]
//	curectl buckets [--selector k=v,...] [--failed] [--max-runs N] [-o json|yaml]
//	curectl manifests [-o json|yaml]
//	curectl completion bash|zsh|fish|powershell; curectl man --dir DIR; curectl --version
//
// Every command that prints takes -o json|yaml (the API's message; watch
// streams JSON Lines); every help lists its exit codes; --log-format json
// makes stderr JSON records. Flags go anywhere on the line. The coordinator is dialled only when a
// command needs it: help, --version, completion and man read no CA.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/render"
	"github.com/cure-oss/cure/tools/version"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// stdin is where --bmc-password-stdin and the wipe confirmation read (tests
// replace it).
var stdin io.Reader = os.Stdin

func main() {
	os.Exit(run(os.Args[1:], os.Stdout))
}

// app holds the global flags and the exit code the command chose; the
// connection is made by connect, only when a command runs.
type app struct {
	server, ca, cert, key string
	out                   io.Writer
	in                    io.Reader
	rc                    int
	closers               []func() error
	logFormat             string
	// quiet: connect prints nothing (shell completion fails silently).
	quiet bool
}

// errDone means the command has printed its own error and set app.rc.
var errDone = errors.New("done")

func run(args []string, out io.Writer) int {
	a := &app{out: out, in: stdin}
	logFormat = logText
	// --log-format replaces slog's default for this run only.
	defer slog.SetDefault(slog.Default())
	root := a.rootCmd()
	root.SetArgs(args)
	// The pinned --version line alone (cobra would print "curectl version …").
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetErr(diagWriter{})
	err := root.Execute()
	for _, c := range a.closers {
		_ = c()
	}
	rc := a.rc
	if err != nil && !errors.Is(err, errDone) {
		// Flag, argument and unknown-command errors: usage errors.
		fmt.Fprintf(stderr(), "curectl: %v\n(see `curectl --help` or `curectl COMMAND --help`)\n", err)
		rc = 2
	}
	logExit(rc)
	return rc
}

// versionString is the release or module version the man pages name.
func versionString() string { return version.Get().Version }

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "curectl",
		Short: "Operator CLI of the CURE coordinator (provisioner-lite)",
		Long: `curectl talks to the coordinator's operator API over TLS with an operator
client certificate (provisioner-lite pki --operator NAME --role ROLE).
Without --cert/--key it uses operators/operator.pem beside the CA file, else
operators/admin.pem (the certificate provisioner-lite init issues).
Flags may be given anywhere on the line; defaults come from CURE_SERVER,
CURE_CA, CURE_CERT and CURE_KEY.

` + outputHelp + `

--log-format json writes each line curectl prints to stderr as a JSON
record (time, level, msg: ERROR for curectl's own error lines), the last
one {"msg":"exit","rc":N}. Shell completion (curectl completion SHELL)
asks the coordinator for node ids, SKUs and suites, within 2 s, silently.`,
		PersistentPreRunE: func(*cobra.Command, []string) error { return setLogFormat(a.logFormat) },
		Version:           version.String("curectl"),
		SilenceErrors:     true,
		SilenceUsage:      true,
		Args:              cobra.NoArgs,
		RunE:              func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	// Before the completion command is made: it keeps the writer it finds.
	root.SetOut(a.out)
	pf := root.PersistentFlags()
	pf.StringVar(&a.server, "server", envOr("CURE_SERVER", "127.0.0.1:8443"), "coordinator gRPC address HOST:PORT (its certificate must name HOST); several, comma-separated: provision moves on to the next when one is full or down")
	pf.StringVar(&a.ca, "ca", envOr("CURE_CA", filepath.Join("state", "pki", "ca.pem")), "coordinator CA certificate")
	pf.StringVar(&a.cert, "cert", os.Getenv("CURE_CERT"), "operator client certificate (default: operators/operator.pem beside --ca, else operators/admin.pem, if present)")
	pf.StringVar(&a.key, "key", os.Getenv("CURE_KEY"), "operator client key (default: the key beside the default certificate)")
	pf.StringVar(&a.logFormat, "log-format", logText, "text|json: how errors and notes are written to stderr")
	_ = root.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions([]string{logText, logJSON}, cobra.ShellCompDirectiveNoFileComp))
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
	root.AddCommand(a.provisionCmd(), a.cancelCmd(), a.watchCmd(), a.reportCmd(), a.auditCmd(),
		a.nodesCmd(), a.auditLogCmd(), a.bucketsCmd(), a.fleetBandsCmd(), a.manifestsCmd(), a.manCmd(root))
	// Made now rather than at Execute, so their help gets the exit codes too.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	documentExitCodes(root)
	return root
}

// connect loads the CA and the operator certificate and dials every
// --server address. TLS verifies the host part of each address as given.
func (a *app) connect() (curev1.OperatorServiceClient, []render.Target, error) {
	caPEM, err := os.ReadFile(a.ca)
	if err != nil {
		return nil, nil, a.fail(1, "CA certificate --ca %s: %v (give --ca or CURE_CA: the coordinator's state/pki/ca.pem)", a.ca, err)
	}
	cert, err := operatorCert(a.ca, a.cert, a.key)
	if err != nil {
		return nil, nil, a.fail(1, "%v", err)
	}
	var targets []render.Target
	for _, addr := range strings.Split(a.server, ",") {
		if addr = strings.TrimSpace(addr); addr == "" {
			continue
		}
		host, err := serverName(addr)
		if err != nil {
			return nil, nil, a.fail(2, "--server %s: %v", addr, err)
		}
		tlsCfg, err := pki.ClientTLSConfig(caPEM, host, cert.cert)
		if err != nil {
			return nil, nil, a.fail(1, "--ca %s: %v", a.ca, err)
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
			grpc.WithChainUnaryInterceptor(cert.unaryInterceptor), grpc.WithChainStreamInterceptor(cert.streamInterceptor))
		if err != nil {
			return nil, nil, a.fail(1, "--server %s: %v", addr, err)
		}
		a.closers = append(a.closers, conn.Close)
		targets = append(targets, render.Target{Addr: addr, Client: curev1.NewOperatorServiceClient(conn)})
	}
	if len(targets) == 0 {
		return nil, nil, a.fail(2, "--server: no address")
	}
	// Instances share one database: any of them answers reads alike.
	return targets[0].Client.(curev1.OperatorServiceClient), targets, nil
}

// fail prints "curectl: MSG" (unless quiet), sets the exit code and
// returns errDone.
func (a *app) fail(rc int, format string, args ...any) error {
	if !a.quiet {
		fmt.Fprintf(stderr(), "curectl: "+format+"\n", args...)
	}
	a.rc = rc
	return errDone
}

// serverName is the name TLS verifies: the host of HOST:PORT as the
// operator gave it (an IP or a DNS name the coordinator's certificate must
// carry: its --advertise address, 127.0.0.1 or localhost).
func serverName(addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("want HOST:PORT: %w", err)
	}
	if host == "" {
		return "", errors.New("want HOST:PORT: no host")
	}
	return host, nil
}

// client is connect for the commands that need only one instance.
func (a *app) client() (curev1.OperatorServiceClient, error) {
	c, _, err := a.connect()
	return c, err
}

// with runs a command body with a client and records its exit code.
func (a *app) with(body func(ctx context.Context, c curev1.OperatorServiceClient) int) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	a.rc = body(context.Background(), c)
	return nil
}

func (a *app) manCmd(root *cobra.Command) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "man --dir DIR",
		Short: "Write man pages (section 1) for curectl and every command",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return a.fail(1, "man --dir %s: %v", dir, err)
			}
			root.DisableAutoGenTag = true
			if err := doc.GenManTree(root, &doc.GenManHeader{Title: "CURECTL", Section: "1", Source: "CURE " + versionString()}, dir); err != nil {
				return a.fail(1, "man --dir %s: %v", dir, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "man pages written to %s\n", dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "man", "directory to write curectl.1 and curectl-COMMAND.1 into")
	return cmd
}

type provisionOpts struct {
	mode, manifest, selector, output string
	resume, follow, yes              bool
}

func (a *app) provisionCmd() *cobra.Command {
	var o provisionOpts
	cmd := &cobra.Command{
		Use:   "provision [NODE...]",
		Short: "Start a run (provision, audit, verify, diagnostic, burnin, wipe or service) on nodes",
		Long: `Start a run on each NODE and on every node --selector matches.
--mode wipe destroys the disks' data: curectl lists the nodes and disks and
asks for confirmation on a terminal; elsewhere it refuses unless --yes.
A provision of a node in the day-2 pool (in service, accepting, draining,
quarantined...) erases a deployed node: it needs the admin role, and
curectl lists those nodes and asks the same way (--yes in a script).

Exit codes:
  0  every run started (with --watch: and every run succeeded)
  1  nothing started: no node could be started, or the coordinator could not be reached
  2  bad usage (flags, no node given), or a wipe (or a deployed node's provision) not confirmed
  3  with --watch: a run ended failed, canceled or needing attention (its report says why)
  4  without --watch: some nodes started, others were refused (listed with why)

-o json|yaml prints the ProvisionResponse (runs started, nodes refused with
why); with --watch it is refused (follow with curectl report -o json).`,
		Example: `  curectl provision --watch gpu-001                   # provision one node and follow it to the end
  curectl provision --selector rack=r12,sku=hgx-b200  # every node of a rack and SKU
  curectl provision --resume gpu-001                  # continue a failed run from the phase it reached
  curectl provision --mode audit gpu-001              # compare firmware and settings, write nothing
  curectl provision --mode diagnostic --manifest rma-quick --watch gpu-001
  curectl provision --mode wipe --yes gpu-001         # erase the disks (without --yes: asks on a terminal)
  curectl provision --mode service --watch gpu-001    # firmware and BIOS settings on a drained deployed node; disks untouched`,
		ValidArgsFunction: a.completeNodes(0),
		RunE: func(_ *cobra.Command, args []string) error {
			format, err := parseOutput(o.output)
			if err != nil {
				return err
			}
			if structuredFormat(format) && o.follow {
				return errors.New("provision: -o " + format + " prints what was started; with --watch, follow with `curectl report -o " + format + " NODE`")
			}
			o.output = format
			c, targets, err := a.connect()
			if err != nil {
				return err
			}
			a.rc = provision(context.Background(), c, targets, o, args, a.in, a.out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.mode, "mode", "provision", "provision|audit|verify|diagnostic|burnin|wipe|service")
	f.StringVar(&o.manifest, "manifest", "", "manifest name: a SKU, or a suite for diagnostic and burnin; default: the node's SKU")
	f.BoolVar(&o.resume, "resume", false, "continue the node's latest unfinished run")
	f.BoolVar(&o.follow, "watch", false, "follow the timeline until the run ends, then print the report")
	f.StringVar(&o.selector, "selector", "", "also every node matching k=v,... (labels; sku matches the node's SKU)")
	f.BoolVarP(&o.yes, "yes", "y", false, "do not ask before a wipe, or a provision of nodes in the pool")
	addOutputFlag(cmd, &o.output, outTable, outJSON, outYAML)
	_ = cmd.RegisterFlagCompletionFunc("mode", completeModes)
	_ = cmd.RegisterFlagCompletionFunc("manifest", a.completeRunManifest)
	return cmd
}

func (a *app) cancelCmd() *cobra.Command {
	var selector, reason, output string
	var runs []string
	cmd := &cobra.Command{
		Use:               "cancel [NODE...]",
		Short:             "Cancel the active runs of nodes, by run id or by selector",
		ValidArgsFunction: a.completeNodes(0),
		RunE: func(_ *cobra.Command, args []string) error {
			format, err := parseOutput(output)
			if err != nil {
				return err
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				return cancelRuns(ctx, c, selector, runs, reason, args, format, a.out)
			})
		},
	}
	addOutputFlag(cmd, &output, outTable, outJSON, outYAML)
	cmd.Flags().StringVar(&selector, "selector", "", "also every node matching k=v,... (labels; sku)")
	cmd.Flags().StringArrayVar(&runs, "run", nil, "run id (repeatable)")
	cmd.Flags().StringVar(&reason, "reason", "", "recorded in the run's timeline")
	return cmd
}

type watchOpts struct {
	expect                  []string
	runID, selector, output string
	fleet, once             bool
	interval                time.Duration
}

func (a *app) watchCmd() *cobra.Command {
	var o watchOpts
	cmd := &cobra.Command{
		Use:   "watch [NODE...] | --run RUN | --selector k=v,... | --fleet",
		Short: "Follow a run's timeline, a live summary of many nodes, or the fleet",
		Long: `With one NODE or --run: the run's timeline until it ends.
With several NODEs or --selector: one line per node with its phase, a
progress bar and an ETA for long phases (redrawn in place on a terminal).
With --fleet: counts per status and phase, failures first.
-o json|yaml streams instead: one compact JSON object per line (YAML: a
document each): a TimelineEntry per event of one run, a FleetRun per node
and refresh for several nodes, a FleetStatus per refresh of --fleet.`,
		ValidArgsFunction: a.completeNodes(0),
		RunE: func(_ *cobra.Command, args []string) error {
			format, err := parseOutput(o.output)
			if err != nil {
				return err
			}
			sel, err := render.ParseSelector(o.selector)
			if err != nil {
				return fmt.Errorf("--selector: %w", err)
			}
			expect, err := parseExpect(o.expect)
			if err != nil {
				return err
			}
			if o.runID == "" && len(args) == 0 && len(sel) == 0 && !o.fleet {
				return errors.New("watch: give NODE..., --run RUN, --selector k=v,... or --fleet")
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				switch {
				case o.fleet:
					return watchFleet(ctx, c, sel, o.interval, o.once, format, a.out)
				case len(args) > 1 || (len(sel) > 0 && o.runID == ""):
					return watchMany(ctx, c, args, sel, expect, o.interval, o.once, format, a.out)
				}
				return watch(ctx, c, o.runID, firstArg(args), format, a.out)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.runID, "run", "", "run id")
	f.BoolVar(&o.fleet, "fleet", false, "follow the whole fleet (or --selector's nodes): counts per status and phase, failures first")
	f.StringVar(&o.selector, "selector", "", "only nodes matching k=v,... (labels; sku)")
	f.DurationVar(&o.interval, "interval", 2*time.Second, "with --fleet or several nodes: refresh period")
	f.BoolVar(&o.once, "once", false, "with --fleet or several nodes: print one summary and exit")
	addOutputFlag(cmd, &o.output, outTable, outJSON, outYAML)
	f.StringArrayVar(&o.expect, "expect", nil, "with several nodes: PHASE=DURATION a phase is expected to take, for its bar and ETA (repeatable; default: the median of the watched nodes that finished it)")
	return cmd
}

func firstArg(args []string) string {
	if len(args) > 0 {
		return args[0]
	}
	return ""
}

func (a *app) reportCmd() *cobra.Command {
	var runID, htmlFile, output string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "report [NODE] | --run RUN",
		Short: "Print a run's report (the node's latest run, or --run)",
		Long: `Print a run's report: the node's latest run, or --run RUN. --html FILE
writes the report and the run's timeline as one self-contained HTML file
(for an RMA ticket) and prints one line naming it (with -o json|yaml: the
report as well).

Exit codes:
  0  the run succeeded
  1  the report could not be read (or --html FILE not written)
  2  bad usage (flags, no node given)
  3  the run did not succeed (failed, canceled, needs attention, or still running)`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeNodes(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if runID == "" && len(args) == 0 {
				return errors.New("report: give a NODE or --run RUN")
			}
			format, err := parseOutput(output)
			if err != nil {
				return err
			}
			if asJSON {
				format = outJSON
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				if htmlFile != "" {
					return reportHTML(ctx, c, runID, firstArg(args), htmlFile, format, a.out)
				}
				return report(ctx, c, runID, firstArg(args), format, a.out)
			})
		},
	}
	cmd.Flags().StringVar(&runID, "run", "", "run id")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output (same as -o json)")
	addOutputFlag(cmd, &output, outTable, outWide, outJSON, outYAML)
	cmd.Flags().StringVar(&htmlFile, "html", "", "write a self-contained HTML report (for an RMA ticket) to this file instead of printing it")
	return cmd
}

func (a *app) auditCmd() *cobra.Command {
	var manifest, output string
	cmd := &cobra.Command{
		Use:   "audit NODE...",
		Short: "Audit nodes directly over Redfish (no boot, no changes)",
		Long: `Compare each node's firmware and settings with its SKU over its BMC's
Redfish alone: no boot, no run, nothing changed.

Exit codes:
  0  every component matches
  1  a component differs, or the coordinator could not be reached
  2  bad usage, or a node's BMC could not be audited (its ERROR row says why)`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: a.completeNodes(0),
		RunE: func(_ *cobra.Command, args []string) error {
			format, err := parseOutput(output)
			if err != nil {
				return err
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				return auditDirect(ctx, c, manifest, args, format, a.out)
			})
		},
	}
	cmd.Flags().StringVar(&manifest, "manifest", "", "manifest (SKU) name; default: each node's")
	_ = cmd.RegisterFlagCompletionFunc("manifest", a.completeSKUs)
	addOutputFlag(cmd, &output, outTable, outJSON, outYAML)
	return cmd
}

func auditDirect(ctx context.Context, c curev1.OperatorServiceClient, manifest string, nodeIDs []string, format string, out io.Writer) int {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	resp, err := c.AuditDirect(cctx, &curev1.AuditDirectRequest{NodeIds: nodeIDs, Manifest: manifest})
	if err != nil {
		fmt.Fprintln(stderr(), "curectl audit:", err)
		return 1
	}
	if structuredFormat(format) {
		// The same exit code as the table: a script tests it.
		rc := render.PrintAudit(io.Discard, resp.GetNodes())
		if r := printStructured(resp, format, out); r != 0 {
			return r
		}
		return rc
	}
	return render.PrintAudit(out, resp.GetNodes())
}

func (a *app) auditLogCmd() *cobra.Command {
	var kind, node, output string
	var limit uint
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "audit-log",
		Short: "Print the audit log: operator API calls and refused peers, newest first",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			format, err := parseOutput(output)
			if err != nil {
				return err
			}
			if asJSON {
				format = outJSON
			}
			return a.with(func(ctx context.Context, c curev1.OperatorServiceClient) int {
				return auditLog(ctx, c, &curev1.ListAuditLogRequest{Kind: kind, NodeId: node, Limit: uint32(limit)}, format, a.out)
			})
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "", "operator (API calls) or security (refused peers); default both")
	cmd.Flags().StringVar(&node, "node", "", "only entries naming this node")
	_ = cmd.RegisterFlagCompletionFunc("node", a.completeNodeFlag)
	cmd.Flags().UintVar(&limit, "limit", 100, "entries, newest first")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output (same as -o json)")
	addOutputFlag(cmd, &output, outTable, outWide, outJSON, outYAML)
	return cmd
}

func auditLog(ctx context.Context, c curev1.OperatorServiceClient, req *curev1.ListAuditLogRequest, format string, out io.Writer) int {
	resp, err := auditLogPages(ctx, c, req)
	if err != nil {
		fmt.Fprintln(stderr(), "curectl audit-log:", err)
		return 1
	}
	switch format {
	case outJSON, outYAML:
		return printStructured(resp, format, out)
	case outWide:
		render.PrintAuditLogWide(out, resp.GetEntries())
	default:
		render.PrintAuditLog(out, resp.GetEntries())
	}
	return 0
}

// auditLogPages reads req.limit entries (default 100), newest first, page
// by page: the coordinator answers a page at a time that stays under the
// receive limit, and says where the next one starts.
func auditLogPages(ctx context.Context, c curev1.OperatorServiceClient, req *curev1.ListAuditLogRequest) (*curev1.ListAuditLogResponse, error) {
	want := int(req.GetLimit())
	if want <= 0 {
		want = 100
	}
	page := proto.Clone(req).(*curev1.ListAuditLogRequest)
	all := &curev1.ListAuditLogResponse{}
	for len(all.Entries) < want {
		page.Limit = uint32(want - len(all.Entries))
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := c.ListAuditLog(cctx, page)
		cancel()
		if err != nil {
			if len(all.Entries) > 0 {
				return nil, fmt.Errorf("after %d entries: %w", len(all.Entries), err)
			}
			return nil, err
		}
		all.Entries = append(all.Entries, resp.GetEntries()...)
		next := resp.GetNextBeforeId()
		// An older coordinator sends no next_before_id: its one page is all.
		if next <= 0 || len(resp.GetEntries()) == 0 || (page.BeforeId > 0 && next >= page.BeforeId) {
			break
		}
		page.BeforeId = next
		all.NextBeforeId = next
	}
	if len(all.Entries) < want {
		all.NextBeforeId = 0
	}
	return all, nil
}

func provision(ctx context.Context, c curev1.OperatorServiceClient, targets []render.Target, o provisionOpts, nodeIDs []string, in io.Reader, out io.Writer) int {
	sel, err := render.ParseSelector(o.selector)
	if err != nil {
		fmt.Fprintln(stderr(), "curectl provision: --selector:", err)
		return 2
	}
	m, err := modes.Parse(o.mode)
	if err != nil {
		fmt.Fprintln(stderr(), "curectl provision: --mode:", err)
		return 2
	}
	if len(nodeIDs) == 0 && len(sel) == 0 {
		fmt.Fprintln(stderr(), "curectl provision: no node given (NODE... or --selector)")
		return 2
	}
	var confirmed []string
	switch {
	case destructive(m):
		if rc := confirmWipe(ctx, c, &nodeIDs, &sel, &confirmed, o.yes, in, stderr()); rc != 0 {
			return rc
		}
	case m == modes.Provision:
		if rc := confirmDeployed(ctx, c, nodeIDs, sel, &confirmed, o.yes, in, stderr()); rc != 0 {
			return rc
		}
	}
	// Starting a run is a few store writes; a large batch gets time in
	// proportion instead of a fixed deadline that would cut it midway.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second+time.Duration(len(nodeIDs))*20*time.Millisecond+5*time.Minute*time.Duration(min(len(sel), 1)))
	defer cancel()
	var progress io.Writer
	if len(targets) > 1 {
		progress = stderr()
	}
	res, err := render.ProvisionAcross(cctx, targets, &curev1.ProvisionRequest{NodeIds: nodeIDs, Selector: sel, Mode: modes.ToProto(m), Manifest: o.manifest, Resume: o.resume,
		ConfirmNodeIds: confirmed}, progress)
	if err != nil {
		fmt.Fprintln(stderr(), "curectl provision:", err)
		return 1
	}
	if structuredFormat(o.output) {
		if rc := printStructured(&curev1.ProvisionResponse{Runs: res.Runs, Refused: res.Refused, Instance: instances(res)}, o.output, out); rc != 0 {
			return rc
		}
	} else {
		for _, r := range res.Runs {
			fmt.Fprintf(out, "run %s started on %s (instance %s)\n", r.GetRunId(), r.GetNodeId(), res.Instance[r.GetRunId()])
		}
		render.PrintRefusals(out, res.Refused)
		fmt.Fprintf(out, "%d started, %d refused\n", len(res.Runs), len(res.Refused))
	}
	if len(res.Runs) == 0 {
		return 1
	}
	resp := &curev1.ProvisionResponse{Runs: res.Runs}
	if !o.follow {
		if len(res.Refused) > 0 {
			return 4
		}
		return 0
	}
	rc := 0
	for _, r := range resp.GetRuns() {
		if code := watch(ctx, c, r.GetRunId(), "", outTable, out); code != 0 {
			rc = code
		}
		if code := report(ctx, c, r.GetRunId(), "", outTable, out); code != 0 {
			rc = code
		}
	}
	return rc
}

// instances names the instances that started runs, comma-separated, in
// the order of the runs (one with a single coordinator).
func instances(res *render.ProvisionResult) string {
	var names []string
	for _, r := range res.Runs {
		if n := res.Instance[r.GetRunId()]; n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

func cancelRuns(ctx context.Context, c curev1.OperatorServiceClient, selector string, runs []string, reason string, nodeIDs []string, format string, out io.Writer) int {
	sel, err := render.ParseSelector(selector)
	if err != nil {
		fmt.Fprintln(stderr(), "curectl cancel: --selector:", err)
		return 2
	}
	if len(nodeIDs) == 0 && len(sel) == 0 && len(runs) == 0 {
		fmt.Fprintln(stderr(), "curectl cancel: give NODE..., --run RUN or --selector")
		return 2
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	resp, err := c.Cancel(cctx, &curev1.CancelRequest{NodeIds: nodeIDs, RunIds: runs, Selector: sel, Reason: reason})
	if err != nil {
		fmt.Fprintln(stderr(), "curectl cancel:", err)
		return 1
	}
	if structuredFormat(format) {
		return printStructured(resp, format, out)
	}
	for _, r := range resp.GetCanceled() {
		fmt.Fprintf(out, "run %s on %s canceled\n", r.GetRunId(), r.GetNodeId())
	}
	render.PrintRefusals(out, resp.GetRefused())
	return 0
}

// watchFleet prints the fleet summary every interval; on a terminal it
// redraws in place.
func watchFleet(ctx context.Context, c curev1.OperatorServiceClient, sel map[string]string, every time.Duration, once bool, format string, out io.Writer) int {
	tty := isTerminal(out)
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		fs, err := c.Fleet(cctx, &curev1.FleetRequest{Selector: sel, MaxFailures: 20})
		cancel()
		if err != nil {
			fmt.Fprintln(stderr(), "curectl watch --fleet:", err)
			return 1
		}
		switch {
		case structuredFormat(format):
			if rc := printStreamed(fs, format, out); rc != 0 {
				return rc
			}
		default:
			if tty && !once {
				fmt.Fprint(out, "\x1b[H\x1b[2J")
			}
			render.PrintFleet(out, fs)
		}
		if once || (fs.GetActive() == 0 && !tty) {
			return 0
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(every):
		}
	}
}

// isTerminal reports whether w is a character device (redraw in place
// there; append plain lines to files and pipes).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func watch(ctx context.Context, c curev1.OperatorServiceClient, runID, node, format string, out io.Writer) int {
	stream, err := c.Watch(ctx, &curev1.WatchRequest{RunId: runID, NodeId: node, Follow: true})
	if err != nil {
		fmt.Fprintln(stderr(), "curectl watch:", err)
		return 1
	}
	tl := render.NewTimeline(out)
	for {
		e, err := stream.Recv()
		if err == io.EOF {
			return 0
		}
		if err != nil {
			fmt.Fprintln(stderr(), "curectl watch:", err)
			return 1
		}
		if structuredFormat(format) {
			if rc := printStreamed(e, format, out); rc != 0 {
				return rc
			}
			continue
		}
		tl.Print(e)
	}
}

func report(ctx context.Context, c curev1.OperatorServiceClient, runID, node string, format string, out io.Writer) int {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rep, err := c.Report(cctx, &curev1.ReportRequest{RunId: runID, NodeId: node})
	if err != nil {
		fmt.Fprintln(stderr(), "curectl report:", err)
		return 1
	}
	printReport(rep, format, out)
	if render.RunStatusOf(rep) != curev1.RunStatus_RUN_SUCCEEDED {
		return 3
	}
	return 0
}

func printReport(rep *curev1.RunReport, format string, out io.Writer) {
	if format == outJSON || format == outYAML {
		printStructured(rep, format, out)
		return
	}
	if format == outWide {
		render.PrintReportWide(out, rep)
		return
	}
	render.PrintReport(out, rep)
}

// reportHTML writes the run's report and timeline as one HTML file, then
// prints one line naming it and the run's status (the text report would
// bury it); -o json|yaml still prints the report for a script.
// The report is fetched first and the timeline by its run id, so both
// describe the same run even if a new one starts on the node in between.
func reportHTML(ctx context.Context, c curev1.OperatorServiceClient, runID, node, file string, format string, out io.Writer) int {
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	rep, err := c.Report(cctx, &curev1.ReportRequest{RunId: runID, NodeId: node})
	if err != nil {
		fmt.Fprintln(stderr(), "curectl report:", err)
		return 1
	}
	stream, err := c.Watch(cctx, &curev1.WatchRequest{RunId: rep.GetRunId(), Follow: false})
	if err != nil {
		fmt.Fprintf(stderr(), "curectl report: timeline of run %s: %v\n", rep.GetRunId(), err)
		return 1
	}
	var timeline []*curev1.TimelineEntry
	for {
		e, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintf(stderr(), "curectl report: timeline of run %s after %d entries: %v\n", rep.GetRunId(), len(timeline), err)
			return 1
		}
		timeline = append(timeline, e)
	}
	// Write beside the target and rename, so a failed write never leaves a
	// truncated report where a ticket might pick it up.
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		fmt.Fprintf(stderr(), "curectl report: --html %s: cannot create a file in %s: %v\n", file, filepath.Dir(file), err)
		return 1
	}
	defer os.Remove(tmp.Name())
	if err := render.WriteHTML(tmp, rep, timeline); err != nil {
		tmp.Close()
		fmt.Fprintf(stderr(), "curectl report: --html %s: %v\n", file, err)
		return 1
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		fmt.Fprintf(stderr(), "curectl report: --html %s: %v\n", file, err)
		return 1
	}
	if err := tmp.Close(); err != nil {
		fmt.Fprintf(stderr(), "curectl report: --html %s: %v\n", file, err)
		return 1
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		fmt.Fprintf(stderr(), "curectl report: --html %s: %v\n", file, err)
		return 1
	}
	line := fmt.Sprintf("wrote %s (run %s on %s: %s, %d timeline entries)\n", file, rep.GetRunId(), rep.GetNodeId(),
		strings.ToUpper(render.RunLabel(render.RunStatusOf(rep))), len(timeline))
	if structuredFormat(format) {
		printStructured(rep, format, out)
		fmt.Fprint(stderr(), "curectl report: "+line)
	} else {
		fmt.Fprint(out, line)
	}
	if render.RunStatusOf(rep) != curev1.RunStatus_RUN_SUCCEEDED {
		return 3
	}
	return 0
}

// clientCert is the operator certificate curectl presents, if any, and where
// it came from, for error messages.
type clientCert struct {
	cert *tls.Certificate
	desc string
}

// defaultOperators are the certificates curectl looks for beside the CA
// without --cert/--key, in order.
var defaultOperators = []string{"operator", "admin"}

// operatorCert loads --cert/--key, or by default operators/operator.pem and
// operator-key.pem beside the CA file when both exist, else admin.pem and
// admin-key.pem. No certificate is not an error here: the coordinator's
// answer explains what is missing.
func operatorCert(caFile, certFile, keyFile string) (clientCert, error) {
	if (certFile == "") != (keyFile == "") {
		return clientCert{}, errors.New("--cert and --key go together: give both (an operator certificate from `provisioner-lite pki --operator NAME --role ROLE`)")
	}
	if certFile == "" {
		// "operator" by convention, else "admin": the one `provisioner-lite
		// init` issues, so a fresh state dir works without exports.
		pkiDir := filepath.Dir(caFile)
		var tried []string
		for _, name := range defaultOperators {
			c, k := pki.OperatorCertFiles(pkiDir, name)
			if fileExists(c) && fileExists(k) {
				certFile, keyFile = c, k
				break
			}
			tried = append(tried, c)
		}
		if certFile == "" {
			return clientCert{desc: fmt.Sprintf("no client certificate (no --cert/--key, no %s)", strings.Join(tried, " or "))}, nil
		}
	}
	c, err := pki.LoadOperatorCert(certFile, keyFile)
	if err != nil {
		return clientCert{}, err
	}
	role, err := pki.CertRole(c.Leaf)
	if err != nil {
		return clientCert{}, err
	}
	return clientCert{cert: &c, desc: fmt.Sprintf("certificate %s (operator %s, role %s)", certFile, c.Leaf.Subject.CommonName, role)}, nil
}

// explain adds what curectl sent to errors that are about authentication, so
// the operator sees which file to fix.
func (cc clientCert) explain(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch {
	case st.Code() == codes.Unauthenticated, st.Code() == codes.PermissionDenied:
		return status.Errorf(st.Code(), "%s (curectl sent %s)", st.Message(), cc.desc)
	case st.Code() == codes.Unavailable && strings.Contains(st.Message(), "x509:") &&
		(strings.Contains(st.Message(), "valid for") || strings.Contains(st.Message(), "SANs")):
		return status.Errorf(st.Code(), "%s (the host in --server must be a name the coordinator's certificate carries: its --advertise address, 127.0.0.1 or localhost)", st.Message())
	case cc.cert != nil && st.Code() == codes.Unavailable && strings.Contains(st.Message(), "tls:"):
		return status.Errorf(st.Code(), "%s (the coordinator may have refused %s: was it issued by this coordinator's CA? re-issue with `provisioner-lite pki --operator NAME --role ROLE`)", st.Message(), cc.desc)
	}
	return err
}

// The interceptors also scrub every answer (render.Scrub): what a runner
// wrote is shown, never executed by the operator's terminal.
func (cc clientCert) unaryInterceptor(ctx context.Context, method string, req, reply any, conn *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, conn, opts...)
	if m, ok := reply.(proto.Message); ok && err == nil {
		render.Scrub(m)
	}
	return cc.explain(err)
}

func (cc clientCert) streamInterceptor(ctx context.Context, desc *grpc.StreamDesc, conn *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, conn, method, opts...)
	if err != nil {
		return nil, cc.explain(err)
	}
	return explainStream{ClientStream: s, cc: cc}, nil
}

// explainStream explains errors of server-streaming calls (Watch), which the
// server reports on the first receive.
type explainStream struct {
	grpc.ClientStream
	cc clientCert
}

func (s explainStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if pm, ok := m.(proto.Message); ok && err == nil {
		render.Scrub(pm)
	}
	if err == nil || err == io.EOF {
		return err
	}
	return s.cc.explain(err)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// watchMany prints one progress line per node, from each node's latest
// run, every interval: redrawn in place on a terminal, appended elsewhere.
// It returns when no watched run is active (or after one round with once).
func watchMany(ctx context.Context, c curev1.OperatorServiceClient, ids []string, sel map[string]string, expect map[string]time.Duration, every time.Duration, once bool, format string, out io.Writer) int {
	nodes := ids
	if len(sel) > 0 {
		ds, err := wipeTargets(ctx, c, ids, sel)
		if err != nil {
			fmt.Fprintln(stderr(), "curectl watch:", err)
			return 1
		}
		nodes = nodes[:0:0]
		for _, d := range ds {
			nodes = append(nodes, d.GetNodeId())
		}
	}
	tty := isTerminal(out)
	for {
		reports := make([]*curev1.RunReport, len(nodes))
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second+time.Duration(len(nodes))*100*time.Millisecond)
		for i, n := range nodes {
			d, err := c.ShowNode(cctx, &curev1.ShowNodeRequest{NodeId: n})
			if err != nil {
				cancel()
				fmt.Fprintf(stderr(), "curectl watch: node %s: %v\n", n, err)
				return 1
			}
			if d.GetLastRunId() == "" {
				continue
			}
			if reports[i], err = c.Report(cctx, &curev1.ReportRequest{RunId: d.GetLastRunId()}); err != nil {
				cancel()
				fmt.Fprintf(stderr(), "curectl watch: node %s: run %s: %v\n", n, d.GetLastRunId(), err)
				return 1
			}
		}
		cancel()
		rows := render.Progress(nodes, reports, expect, time.Now())
		switch {
		case structuredFormat(format):
			for i, r := range rows {
				fr := &curev1.FleetRun{NodeId: r.Node, RunId: r.RunID, Status: reports[i].GetStatus(), Phase: r.Phase, Message: r.Message,
					EndedUnixMs: reports[i].GetEndedUnixMs(), RunStatus: r.Status}
				if rc := printStreamed(fr, format, out); rc != 0 {
					return rc
				}
			}
		default:
			if tty && !once {
				fmt.Fprint(out, "\x1b[H\x1b[2J")
			}
			fmt.Fprintln(out, strings.Join(render.RenderProgress(rows, 20), "\n"))
		}
		active := 0
		for _, r := range rows {
			switch r.Status {
			case curev1.RunStatus_RUN_RUNNING, curev1.RunStatus_RUN_PENDING, curev1.RunStatus_RUN_ATTENTION:
				active++
			case curev1.RunStatus_RUN_SUCCEEDED, curev1.RunStatus_RUN_FAILED, curev1.RunStatus_RUN_CANCELED, curev1.RunStatus_RUN_STATUS_UNSPECIFIED:
				// nothing more to watch
			}
		}
		if once || active == 0 {
			return 0
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(every):
		}
	}
}

// parseExpect reads --expect phase=duration pairs.
func parseExpect(vals []string) (map[string]time.Duration, error) {
	m := map[string]time.Duration{}
	for _, v := range vals {
		k, d, ok := strings.Cut(v, "=")
		dur, err := time.ParseDuration(d)
		if !ok || k == "" || err != nil || dur <= 0 {
			return nil, fmt.Errorf("--expect %q: want PHASE=DURATION, e.g. validate=2h", v)
		}
		m[k] = dur
	}
	return m, nil
}
