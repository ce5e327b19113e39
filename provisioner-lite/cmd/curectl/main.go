// Command curectl is the operator CLI of provisioner-lite. It authenticates
// with an operator client certificate (`provisioner-lite pki --operator NAME`);
// without --cert/--key it uses operators/operator.pem beside the CA file.
//
//	curectl provision [--mode provision] [--manifest sku] [--resume] [--watch] [--selector k=v,...] [NODE...]
//	curectl cancel [--selector k=v,...] [--run RUN] [--reason TEXT] [NODE...]
//	curectl watch NODE|--run RUN|--fleet [--selector k=v,...]
//	curectl report [--json] [--html FILE] NODE|--run RUN
//	curectl buckets [--selector k=v,...] [--failed] [--max-runs N] [--json]
//	curectl nodes
//	curectl audit-log [--kind operator|security] [--node NODE] [--limit N] [--json]
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/curectl"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout))
}

func usage() int {
	fmt.Fprintln(os.Stderr, `usage: curectl [--server ADDR] [--ca FILE] [--cert FILE --key FILE] COMMAND
  provision [--mode M] [--manifest SKU] [--resume] [--watch] [--selector k=v,...] [NODE...]
  cancel [--selector k=v,...] [--run RUN] [--reason TEXT] [NODE...]
  watch [--run RUN] [NODE] | watch --fleet [--selector k=v,...] [--interval 2s] [--once]
  report [--json] [--html FILE] [--run RUN] [NODE]
  buckets [--selector k=v,...] [--failed] [--max-runs N] [--json]   (time buckets p50/p90 per SKU)
  audit [--manifest SKU] NODE...     (direct: Redfish only, no boot, no changes)
  nodes
  audit-log [--kind operator|security] [--node NODE] [--limit N] [--json]`)
	return 2
}

func run(args []string, out io.Writer) int {
	g := flag.NewFlagSet("curectl", flag.ContinueOnError)
	addr := g.String("server", envOr("CURE_SERVER", "127.0.0.1:8443"), "coordinator gRPC address; several, comma-separated: provision moves on to the next when one is full or down")
	ca := g.String("ca", envOr("CURE_CA", filepath.Join("state", "pki", "ca.pem")), "coordinator CA certificate")
	certFile := g.String("cert", os.Getenv("CURE_CERT"), "operator client certificate (default: operators/operator.pem beside --ca, if present)")
	keyFile := g.String("key", os.Getenv("CURE_KEY"), "operator client key (default: operators/operator-key.pem beside --ca, if present)")
	if err := g.Parse(args); err != nil {
		return 2
	}
	if g.NArg() == 0 {
		return usage()
	}
	caPEM, err := os.ReadFile(*ca)
	if err != nil {
		fmt.Fprintln(os.Stderr, "curectl: CA certificate:", err)
		return 1
	}
	cert, err := operatorCert(*ca, *certFile, *keyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "curectl:", err)
		return 1
	}
	tlsCfg, err := pki.ClientTLSConfig(caPEM, "127.0.0.1", cert.cert)
	if err != nil {
		fmt.Fprintln(os.Stderr, "curectl:", err)
		return 1
	}
	var targets []curectl.Target
	for _, a := range strings.Split(*addr, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
			grpc.WithChainUnaryInterceptor(cert.unaryInterceptor), grpc.WithChainStreamInterceptor(cert.streamInterceptor))
		if err != nil {
			fmt.Fprintf(os.Stderr, "curectl: --server %s: %v\n", a, err)
			return 1
		}
		defer conn.Close()
		targets = append(targets, curectl.Target{Addr: a, Client: curev1.NewOperatorServiceClient(conn)})
	}
	if len(targets) == 0 {
		fmt.Fprintln(os.Stderr, "curectl: --server: no address")
		return 2
	}
	// Instances share one database: any of them answers reads alike.
	c := targets[0].Client.(curev1.OperatorServiceClient)
	cmd, rest := g.Arg(0), g.Args()[1:]
	ctx := context.Background()
	switch cmd {
	case "provision":
		return provision(ctx, c, targets, rest, out)
	case "cancel":
		return cancelRuns(ctx, c, rest, out)
	case "watch":
		fs := flag.NewFlagSet("watch", flag.ContinueOnError)
		runID := fs.String("run", "", "run id")
		fleet := fs.Bool("fleet", false, "follow the whole fleet (or --selector's nodes): counts per status and phase, failures first")
		selector := fs.String("selector", "", "with --fleet: only nodes matching k=v,... (labels; sku)")
		interval := fs.Duration("interval", 2*time.Second, "with --fleet: refresh period")
		once := fs.Bool("once", false, "with --fleet: print one summary and exit")
		if fs.Parse(rest) != nil {
			return 2
		}
		if *fleet {
			sel, err := curectl.ParseSelector(*selector)
			if err != nil {
				fmt.Fprintln(os.Stderr, "curectl watch: --selector:", err)
				return 2
			}
			return watchFleet(ctx, c, sel, *interval, *once, out)
		}
		return watch(ctx, c, *runID, fs.Arg(0), out)
	case "buckets":
		return curectl.BucketsCmd(ctx, c, rest, out)
	case "report":
		fs := flag.NewFlagSet("report", flag.ContinueOnError)
		runID := fs.String("run", "", "run id")
		asJSON := fs.Bool("json", false, "JSON output")
		htmlFile := fs.String("html", "", "also write a self-contained HTML report (for an RMA ticket) to this file")
		if fs.Parse(rest) != nil {
			return 2
		}
		if *runID == "" && fs.NArg() == 0 {
			fmt.Fprintln(os.Stderr, "curectl report: give a NODE or --run RUN")
			return 2
		}
		if *htmlFile != "" {
			return reportHTML(ctx, c, *runID, fs.Arg(0), *htmlFile, *asJSON, out)
		}
		return report(ctx, c, *runID, fs.Arg(0), *asJSON, out)
	case "audit":
		fs := flag.NewFlagSet("audit", flag.ContinueOnError)
		manifest := fs.String("manifest", "", "manifest (SKU) name; default: each node's")
		if fs.Parse(rest) != nil {
			return 2
		}
		if fs.NArg() == 0 {
			fmt.Fprintln(os.Stderr, "curectl audit: no node given")
			return 2
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		resp, err := c.AuditDirect(cctx, &curev1.AuditDirectRequest{NodeIds: fs.Args(), Manifest: *manifest})
		if err != nil {
			fmt.Fprintln(os.Stderr, "curectl audit:", err)
			return 1
		}
		return curectl.PrintAudit(out, resp.GetNodes())
	case "nodes":
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		resp, err := c.ListNodes(cctx, &curev1.ListNodesRequest{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "curectl nodes:", err)
			return 1
		}
		curectl.PrintNodes(out, resp.GetNodes())
		return 0
	case "audit-log":
		fs := flag.NewFlagSet("audit-log", flag.ContinueOnError)
		kind := fs.String("kind", "", "operator (API calls) or security (refused peers); default both")
		node := fs.String("node", "", "only entries naming this node")
		limit := fs.Uint("limit", 100, "entries, newest first")
		asJSON := fs.Bool("json", false, "JSON output")
		if fs.Parse(rest) != nil {
			return 2
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		resp, err := c.ListAuditLog(cctx, &curev1.ListAuditLogRequest{Kind: *kind, NodeId: *node, Limit: uint32(*limit)})
		if err != nil {
			fmt.Fprintln(os.Stderr, "curectl audit-log:", err)
			return 1
		}
		if *asJSON {
			printJSON(resp, out)
			return 0
		}
		curectl.PrintAuditLog(out, resp.GetEntries())
		return 0
	}
	return usage()
}

func provision(ctx context.Context, c curev1.OperatorServiceClient, targets []curectl.Target, args []string, out io.Writer) int {
	fs := flag.NewFlagSet("provision", flag.ContinueOnError)
	mode := fs.String("mode", "provision", "provision|audit|verify|diagnostic|burnin|wipe")
	manifest := fs.String("manifest", "", "manifest (SKU) name; default: the node's")
	resume := fs.Bool("resume", false, "continue the node's latest unfinished run")
	follow := fs.Bool("watch", false, "follow the timeline until the run ends, then print the report")
	selector := fs.String("selector", "", "also every node matching k=v,... (labels; sku matches the node's SKU)")
	if fs.Parse(args) != nil {
		return 2
	}
	sel, err := curectl.ParseSelector(*selector)
	if err != nil {
		fmt.Fprintln(os.Stderr, "curectl provision: --selector:", err)
		return 2
	}
	m, err := modes.Parse(*mode)
	if err != nil {
		fmt.Fprintln(os.Stderr, "curectl provision: --mode:", err)
		return 2
	}
	if fs.NArg() == 0 && len(sel) == 0 {
		fmt.Fprintln(os.Stderr, "curectl provision: no node given (NODE... or --selector)")
		return 2
	}
	// Starting a run is a few store writes; a large batch gets time in
	// proportion instead of a fixed deadline that would cut it midway.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second+time.Duration(fs.NArg())*20*time.Millisecond+5*time.Minute*time.Duration(min(len(sel), 1)))
	defer cancel()
	var progress io.Writer
	if len(targets) > 1 {
		progress = os.Stderr
	}
	res, err := curectl.ProvisionAcross(cctx, targets, &curev1.ProvisionRequest{NodeIds: fs.Args(), Selector: sel, Mode: modes.ToProto(m), Manifest: *manifest, Resume: *resume}, progress)
	if err != nil {
		fmt.Fprintln(os.Stderr, "curectl provision:", err)
		return 1
	}
	for _, r := range res.Runs {
		fmt.Fprintf(out, "run %s started on %s (instance %s)\n", r.GetRunId(), r.GetNodeId(), res.Instance[r.GetRunId()])
	}
	curectl.PrintRefusals(out, res.Refused)
	fmt.Fprintf(out, "%d started, %d refused\n", len(res.Runs), len(res.Refused))
	if len(res.Runs) == 0 {
		return 1
	}
	resp := &curev1.ProvisionResponse{Runs: res.Runs}
	if !*follow {
		if len(res.Refused) > 0 {
			return 4
		}
		return 0
	}
	rc := 0
	for _, r := range resp.GetRuns() {
		if code := watch(ctx, c, r.GetRunId(), "", out); code != 0 {
			rc = code
		}
		if code := report(ctx, c, r.GetRunId(), "", false, out); code != 0 {
			rc = code
		}
	}
	return rc
}

func cancelRuns(ctx context.Context, c curev1.OperatorServiceClient, args []string, out io.Writer) int {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	selector := fs.String("selector", "", "also every node matching k=v,... (labels; sku)")
	var runs multiFlag
	fs.Var(&runs, "run", "run id (repeatable)")
	reason := fs.String("reason", "", "recorded in the run's timeline")
	if fs.Parse(args) != nil {
		return 2
	}
	sel, err := curectl.ParseSelector(*selector)
	if err != nil {
		fmt.Fprintln(os.Stderr, "curectl cancel: --selector:", err)
		return 2
	}
	if fs.NArg() == 0 && len(sel) == 0 && len(runs) == 0 {
		fmt.Fprintln(os.Stderr, "curectl cancel: give NODE..., --run RUN or --selector")
		return 2
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	resp, err := c.Cancel(cctx, &curev1.CancelRequest{NodeIds: fs.Args(), RunIds: runs, Selector: sel, Reason: *reason})
	if err != nil {
		fmt.Fprintln(os.Stderr, "curectl cancel:", err)
		return 1
	}
	for _, r := range resp.GetCanceled() {
		fmt.Fprintf(out, "run %s on %s canceled\n", r.GetRunId(), r.GetNodeId())
	}
	curectl.PrintRefusals(out, resp.GetRefused())
	return 0
}

// watchFleet prints the fleet summary every interval; on a terminal it
// redraws in place.
func watchFleet(ctx context.Context, c curev1.OperatorServiceClient, sel map[string]string, every time.Duration, once bool, out io.Writer) int {
	tty := false
	if f, ok := out.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		fs, err := c.Fleet(cctx, &curev1.FleetRequest{Selector: sel, MaxFailures: 20})
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "curectl watch --fleet:", err)
			return 1
		}
		if tty && !once {
			fmt.Fprint(out, "\x1b[H\x1b[2J")
		}
		curectl.PrintFleet(out, fs)
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

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func watch(ctx context.Context, c curev1.OperatorServiceClient, runID, node string, out io.Writer) int {
	stream, err := c.Watch(ctx, &curev1.WatchRequest{RunId: runID, NodeId: node, Follow: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "curectl watch:", err)
		return 1
	}
	tl := curectl.NewTimeline(out)
	for {
		e, err := stream.Recv()
		if err == io.EOF {
			return 0
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "curectl watch:", err)
			return 1
		}
		tl.Print(e)
	}
}

func report(ctx context.Context, c curev1.OperatorServiceClient, runID, node string, asJSON bool, out io.Writer) int {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rep, err := c.Report(cctx, &curev1.ReportRequest{RunId: runID, NodeId: node})
	if err != nil {
		fmt.Fprintln(os.Stderr, "curectl report:", err)
		return 1
	}
	printReport(rep, asJSON, out)
	if rep.GetStatus() != "succeeded" {
		return 3
	}
	return 0
}

func printReport(rep *curev1.RunReport, asJSON bool, out io.Writer) {
	if asJSON {
		printJSON(rep, out)
		return
	}
	curectl.PrintReport(out, rep)
}

func printJSON(m proto.Message, out io.Writer) {
	b, _ := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(m)
	var v any
	_ = json.Unmarshal(b, &v)
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// reportHTML writes the run's report and timeline as one HTML file, then
// prints the usual terminal (or JSON) report so the operator sees the verdict.
// The report is fetched first and the timeline by its run id, so both
// describe the same run even if a new one starts on the node in between.
func reportHTML(ctx context.Context, c curev1.OperatorServiceClient, runID, node, file string, asJSON bool, out io.Writer) int {
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	rep, err := c.Report(cctx, &curev1.ReportRequest{RunId: runID, NodeId: node})
	if err != nil {
		fmt.Fprintln(os.Stderr, "curectl report:", err)
		return 1
	}
	stream, err := c.Watch(cctx, &curev1.WatchRequest{RunId: rep.GetRunId(), Follow: false})
	if err != nil {
		fmt.Fprintf(os.Stderr, "curectl report: timeline of run %s: %v\n", rep.GetRunId(), err)
		return 1
	}
	var timeline []*curev1.TimelineEntry
	for {
		e, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "curectl report: timeline of run %s after %d entries: %v\n", rep.GetRunId(), len(timeline), err)
			return 1
		}
		timeline = append(timeline, e)
	}
	// Write beside the target and rename, so a failed write never leaves a
	// truncated report where a ticket might pick it up.
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		fmt.Fprintf(os.Stderr, "curectl report: --html %s: cannot create a file in %s: %v\n", file, filepath.Dir(file), err)
		return 1
	}
	defer os.Remove(tmp.Name())
	if err := curectl.WriteHTML(tmp, rep, timeline); err != nil {
		tmp.Close()
		fmt.Fprintf(os.Stderr, "curectl report: --html %s: %v\n", file, err)
		return 1
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		fmt.Fprintf(os.Stderr, "curectl report: --html %s: %v\n", file, err)
		return 1
	}
	if err := tmp.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "curectl report: --html %s: %v\n", file, err)
		return 1
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		fmt.Fprintf(os.Stderr, "curectl report: --html %s: %v\n", file, err)
		return 1
	}
	printReport(rep, asJSON, out)
	fmt.Fprintf(os.Stderr, "curectl report: wrote %s (run %s, %d timeline entries)\n", file, rep.GetRunId(), len(timeline))
	if rep.GetStatus() != "succeeded" {
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

// operatorCert loads --cert/--key, or by default operators/operator.pem and
// operator-key.pem beside the CA file when both exist. No certificate is not
// an error here: the coordinator's answer explains what is missing.
func operatorCert(caFile, certFile, keyFile string) (clientCert, error) {
	if (certFile == "") != (keyFile == "") {
		return clientCert{}, errors.New("--cert and --key go together: give both (an operator certificate from `provisioner-lite pki --operator NAME --role ROLE`)")
	}
	if certFile == "" {
		pkiDir := filepath.Dir(caFile)
		certFile, keyFile = pki.OperatorCertFiles(pkiDir, "operator")
		if !fileExists(certFile) || !fileExists(keyFile) {
			return clientCert{desc: fmt.Sprintf("no client certificate (no --cert/--key, no %s)", certFile)}, nil
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
	case cc.cert != nil && st.Code() == codes.Unavailable && strings.Contains(st.Message(), "tls:"):
		return status.Errorf(st.Code(), "%s (the coordinator may have refused %s: was it issued by this coordinator's CA? re-issue with `provisioner-lite pki --operator NAME --role ROLE`)", st.Message(), cc.desc)
	}
	return err
}

// The interceptors also scrub every answer (curectl.Scrub): what a runner
// wrote is shown, never executed by the operator's terminal.
func (cc clientCert) unaryInterceptor(ctx context.Context, method string, req, reply any, conn *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, conn, opts...)
	if m, ok := reply.(proto.Message); ok && err == nil {
		curectl.Scrub(m)
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
		curectl.Scrub(pm)
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
