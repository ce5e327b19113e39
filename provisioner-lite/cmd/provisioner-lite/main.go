// Command provisioner-lite is the thin coordinator: it drives BMCs over
// Redfish, serves the boot chain and artifacts over HTTP, and talks gRPC with
// the runners in CURE. Every run lives in its SQLite store, so a restart
// resumes where the runs were.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/bootserver"
	"github.com/cure-oss/cure/provisioner-lite/nodes"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	if len(os.Args) > 1 && os.Args[1] == "pki" {
		os.Exit(pkiCmd(os.Args[2:]))
	}
	var (
		stateDir    = flag.String("state-dir", "state", "store, PKI and artifact directory")
		manifestDir = flag.String("manifests", "manifests/examples", "directory of SKU manifests (<sku>.yaml)")
		nodesFile   = flag.String("nodes", "", "node inventory (YAML or CSV) imported at start")
		imageDir    = flag.String("image-dir", "out/image", "cure-build output: vmlinuz, initramfs")
		httpListen  = flag.String("http-listen", "127.0.0.1:8080", "boot/artifact HTTP listen address")
		grpcListen  = flag.String("grpc-listen", "127.0.0.1:8443", "gRPC (runners and curectl) listen address")
		advertise   = flag.String("advertise", "10.0.2.2", "host or IP nodes use to reach this coordinator")
		bmcBase     = flag.String("bmc-base-url", "", "artifact server base URL as BMCs reach it (default: the nodes' URL)")
		grpcAdv     = flag.String("advertise-grpc", "", "host:port nodes dial for gRPC (default: advertise host + the gRPC port)")
		reconnect   = flag.Duration("reconnect", 3*time.Minute, "a runner gone this long counts as a disconnect")
		bmcTimeout  = flag.Duration("bmc-timeout", 30*time.Second, "timeout of one Redfish call")
		waitCURE    = flag.Duration("wait-cure", 10*time.Minute, "PXE boot to runner registered budget")
		waitHost    = flag.Duration("wait-host", 15*time.Minute, "reboot to installed OS callback budget")
		attempts    = flag.Int("phase-attempts", 3, "attempts per phase before the run fails")
		imports     multiFlag
	)
	flag.Var(&imports, "import-artifact", "file to add to the content-addressed artifact store (repeatable)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	slog.SetDefault(log)
	if err := run(log, *stateDir, *manifestDir, *nodesFile, *imageDir, *httpListen, *grpcListen, *advertise, *grpcAdv, *bmcBase, imports,
		pipeline.Timeouts{BMCCall: *bmcTimeout, WaitForCURE: *waitCURE, HostOS: *waitHost, Reconnect: *reconnect}, pipeline.Budgets{PhaseAttempts: *attempts}); err != nil {
		log.Error("provisioner-lite", "err", err)
		os.Exit(1)
	}
}

// pkiCmd creates the CA and, with --operator, issues (or reuses) that
// operator's client certificate for curectl.
func pkiCmd(args []string) int {
	fs := flag.NewFlagSet("pki", flag.ExitOnError)
	stateDir := fs.String("state-dir", "state", "state directory")
	operator := fs.String("operator", "", "also issue (or reuse) the curectl client certificate of this operator (CN; e.g. a login name)")
	fs.Parse(args)
	pkiDir := filepath.Join(*stateDir, "pki")
	ca, err := pki.EnsureCA(pkiDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pki:", err)
		return 1
	}
	fmt.Printf("%s (%d bytes)\n", filepath.Join(pkiDir, pki.CACertFile), len(ca))
	if *operator == "" {
		return 0
	}
	oc, err := pki.IssueOperatorCert(pkiDir, *operator)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pki:", err)
		return 1
	}
	what := "reused"
	if oc.Issued {
		what = "issued"
	}
	fmt.Printf("operator %s: certificate %s, key %s (%s, valid until %s)\n", oc.Name, oc.CertFile, oc.KeyFile, what, oc.NotAfter.Format(time.DateOnly))
	fmt.Printf("use: curectl --ca %s --cert %s --key %s ...\n", filepath.Join(pkiDir, pki.CACertFile), oc.CertFile, oc.KeyFile)
	return 0
}

func run(log *slog.Logger, stateDir, manifestDir, nodesFile, imageDir, httpListen, grpcListen, advertise, grpcAdvertise, bmcBaseURL string,
	imports []string, timeouts pipeline.Timeouts, budgets pipeline.Budgets) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	st, err := store.Open(filepath.Join(stateDir, "cure.db"))
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()

	if nodesFile != "" {
		ns, err := nodes.Load(nodesFile)
		if err != nil {
			return err
		}
		for _, n := range ns {
			if err := st.UpsertNode(ctx, n); err != nil {
				return fmt.Errorf("import node %s: %w", n.ID, err)
			}
		}
		log.Info("node inventory imported", "file", nodesFile, "nodes", len(ns))
	}
	artifactDir := filepath.Join(stateDir, "artifacts")
	for _, f := range imports {
		sum, size, err := bootserver.ImportArtifact(artifactDir, f)
		if err != nil {
			return fmt.Errorf("import artifact %s: %w", f, err)
		}
		log.Info("artifact imported", "file", f, "sha256", sum, "size", size)
	}

	_, httpPort, err := net.SplitHostPort(httpListen)
	if err != nil {
		return fmt.Errorf("--http-listen: %w", err)
	}
	_, grpcPort, err := net.SplitHostPort(grpcListen)
	if err != nil {
		return fmt.Errorf("--grpc-listen: %w", err)
	}
	baseURL := "http://" + net.JoinHostPort(advertise, httpPort)

	pkiDir := filepath.Join(stateDir, "pki")
	if _, err := pki.EnsureCA(pkiDir); err != nil {
		return err
	}
	tlsCfg, err := pki.ServerTLSConfig(pkiDir, []string{advertise, "127.0.0.1", "localhost"})
	if err != nil {
		return err
	}

	hub := sessions.NewHub()
	eng := pipeline.New(ctx, pipeline.Config{
		Store: st, Hub: hub, Log: log,
		ConnectBMC: func(ctx context.Context, n store.Node) (pipeline.BMC, error) {
			return redfish.Connect(ctx, redfish.Endpoint{URL: n.BMCURL, Username: n.BMCUser, Password: n.BMCPassword, Insecure: true},
				redfish.Options{Timeout: timeouts.BMCCall, Logger: log})
		},
		Manifests:   &pipeline.Catalog{Dir: manifestDir},
		ArtifactDir: artifactDir,
		BaseURL:     baseURL,
		BMCBaseURL:  bmcBaseURL,
		RunnerAddr:  nonEmpty(grpcAdvertise, net.JoinHostPort(advertise, grpcPort)),
		Timeouts:    timeouts,
		Budgets:     budgets,
	})

	bs, err := bootserver.New(bootserver.Config{ImageDir: imageDir, ArtifactDir: artifactDir, BaseURL: baseURL, Logger: log}, eng)
	if err != nil {
		return err
	}
	httpSrv := &http.Server{Addr: httpListen, Handler: bs.Handler(), ReadHeaderTimeout: 10 * time.Second}
	hl, err := net.Listen("tcp", httpListen)
	if err != nil {
		return err
	}

	// Runners and operators share the listener: TLS verifies a client
	// certificate when one is sent, and OperatorAuth requires an operator
	// certificate on OperatorService only (runners use their boot token).
	opts := append([]grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(tlsCfg)),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}, server.OperatorAuth(log)...)
	gs := grpc.NewServer(opts...)
	curev1.RegisterRunnerServiceServer(gs, &server.RunnerService{Store: st, Hub: hub, Log: log})
	curev1.RegisterOperatorServiceServer(gs, &server.OperatorService{Store: st, Starter: eng, Auditor: eng})
	gl, err := net.Listen("tcp", grpcListen)
	if err != nil {
		return err
	}

	errc := make(chan error, 2)
	go func() { errc <- httpSrv.Serve(hl) }()
	go func() { errc <- gs.Serve(gl) }()
	go st.PruneBootTokensEvery(ctx, 10*time.Minute, time.Hour, log)
	n, err := eng.Resume(ctx)
	if err != nil {
		return err
	}
	log.Info("provisioner-lite ready", "http", httpListen, "grpc", grpcListen, "advertise", advertise, "resumed_runs", n, "state", stateDir)

	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("server", "err", err)
		}
	}
	log.Info("shutting down; active runs resume at next start")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = httpSrv.Shutdown(sctx)
	gs.Stop()
	stop()
	eng.Wait()
	return nil
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
