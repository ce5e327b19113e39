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
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/bootserver"
	"github.com/cure-oss/cure/provisioner-lite/nodes"
	"github.com/cure-oss/cure/provisioner-lite/pacing"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/statedir"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// config is everything run needs, from the flags.
type config struct {
	stateDir, manifestDir, nodesFile, imageDir string
	httpListen, grpcListen, advertise, grpcAdv string
	bmcBaseURL                                 string
	imports                                    []string
	timeouts                                   pipeline.Timeouts
	budgets                                    pipeline.Budgets
	bindBootIP                                 bool
	tokensPerWindow                            int
	eventLimits                                store.EventLimits
	retention                                  store.Retention
	httpMaxConns, grpcMaxConns                 int
	bmcCA                                      string
	maxRuns                                    int
	instance                                   string
	peerGRPC                                   string
	statsEvery                                 time.Duration
	db                                         string
	leaseTTL                                   time.Duration
	powerRate                                  float64
	powerBurst, bmcInflight, bmcLogins         int
	powerGroups                                string
	bmcIdle                                    time.Duration
	pprofListen                                string
	metricsListen, webListen                   string
	webhooks                                   []string
	webhookSecret                              string
}

func main() {
	// Everything this process creates (state, keys, logs it writes) is
	// private to the coordinator's user, whatever the caller's umask.
	syscall.Umask(0o077)
	if len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-") {
		switch os.Args[1] {
		case "pki":
			os.Exit(pkiCmd(os.Args[2:]))
		default:
			fmt.Fprintf(os.Stderr, "provisioner-lite: unknown command %q: want `provisioner-lite [flags]` (the coordinator) or `provisioner-lite pki [flags]`\n", os.Args[1])
			os.Exit(2)
		}
	}
	var c config
	var imports, webhooks multiFlag
	flag.StringVar(&c.stateDir, "state-dir", "state", "store, PKI and artifact directory (0700; one coordinator at a time)")
	flag.StringVar(&c.manifestDir, "manifests", "manifests/examples", "directory of SKU manifests (<sku>.yaml)")
	flag.StringVar(&c.nodesFile, "nodes", "", "node inventory (YAML or CSV) imported at start")
	flag.StringVar(&c.imageDir, "image-dir", "out/image", "cure-build output: vmlinuz, initramfs")
	flag.StringVar(&c.httpListen, "http-listen", "127.0.0.1:8080", "boot/artifact HTTP listen address")
	flag.StringVar(&c.grpcListen, "grpc-listen", "127.0.0.1:8443", "gRPC (runners and curectl) listen address")
	flag.StringVar(&c.advertise, "advertise", "10.0.2.2", "host or IP nodes use to reach this coordinator")
	flag.StringVar(&c.bmcBaseURL, "bmc-base-url", "", "artifact server base URL as BMCs reach it (default: the nodes' URL)")
	flag.StringVar(&c.grpcAdv, "advertise-grpc", "", "host:port nodes dial for gRPC (default: advertise host + the gRPC port)")
	flag.DurationVar(&c.timeouts.Reconnect, "reconnect", 3*time.Minute, "a runner gone this long counts as a disconnect")
	flag.DurationVar(&c.timeouts.BMCCall, "bmc-timeout", 30*time.Second, "timeout of one Redfish call")
	flag.DurationVar(&c.timeouts.BMCTask, "bmc-task-timeout", time.Hour, "a BMC firmware update task, from submission to its end")
	flag.DurationVar(&c.timeouts.BMCReset, "bmc-reset-timeout", 10*time.Minute, "a BMC reset until the BMC answers again")
	flag.DurationVar(&c.timeouts.RetryBase, "retry-base", 2*time.Second, "first delay before a failed phase is tried again (doubles per attempt, full jitter)")
	flag.DurationVar(&c.timeouts.RetryMax, "retry-max", time.Minute, "cap of the delay before a failed phase is tried again")
	flag.DurationVar(&c.timeouts.WaitForCURE, "wait-cure", 10*time.Minute, "PXE boot to runner registered budget (also a boot token's life)")
	flag.DurationVar(&c.timeouts.HostOS, "wait-host", 15*time.Minute, "reboot to installed OS callback budget (the callback is refused after it)")
	flag.IntVar(&c.budgets.PhaseAttempts, "phase-attempts", 3, "attempts per phase before the run fails")
	flag.BoolVar(&c.bindBootIP, "bind-boot-ip", true, "refuse a runner's first Hello from another IP than the one that fetched its iPXE script "+
		"(turn off only if the site's DHCP gives iPXE and CURE different addresses)")
	flag.IntVar(&c.tokensPerWindow, "boot-tokens-per-window", 6, "boot tokens one PXE boot of a node may mint (iPXE retries the script)")
	flag.Int64Var(&c.eventLimits.MaxEvents, "max-run-events", store.DefaultEventLimits.MaxEvents, "runner events stored per run; past it metrics and logs are dropped")
	flag.Int64Var(&c.eventLimits.MaxBytes, "max-run-event-bytes", store.DefaultEventLimits.MaxBytes, "bytes of runner events stored per run; past it metrics and logs are dropped")
	flag.Int64Var(&c.eventLimits.MaxVerdicts, "max-run-verdicts", store.DefaultEventLimits.MaxVerdicts, "distinct verdicts a run's runner may report")
	flag.DurationVar(&c.retention.RunEvents, "retention", store.DefaultRetention.RunEvents, "keep the runner's metrics and logs of finished runs this long (phases and verdicts stay)")
	flag.DurationVar(&c.retention.Audit, "audit-retention", store.DefaultRetention.Audit, "keep audit log entries this long")
	flag.IntVar(&c.httpMaxConns, "http-max-conns", 4096, "open connections of the boot/artifact server")
	flag.IntVar(&c.grpcMaxConns, "grpc-max-conns", 8192, "open connections of the gRPC server")
	flag.StringVar(&c.bmcCA, "bmc-ca", "", "PEM CA bundle that verifies BMC certificates of nodes without caFile or fingerprint (empty: the system roots)")
	flag.IntVar(&c.maxRuns, "max-runs", pipeline.DefaultMaxRuns, "runs this instance drives at once; Provision beyond it is refused (ResourceExhausted) so curectl can try another instance")
	flag.StringVar(&c.peerGRPC, "peer-grpc", "", "other instances of this fleet (shared database) as nodes dial them, host:port comma-separated: "+
		"a runner whose coordinator dies reconnects to the next")
	flag.StringVar(&c.db, "db", os.Getenv("CURE_DB"), "database: empty for SQLite in the state dir (one instance), or a PostgreSQL DSN "+
		"(postgres://… or host=… dbname=…) shared by several instances; default $CURE_DB (keeps a password off the command line)")
	flag.Float64Var(&c.powerRate, "power-on-rate", 2, "power-ons per second per PDU or rack (see --power-group-label); 0: not paced")
	flag.IntVar(&c.powerBurst, "power-on-burst", 8, "power-ons a PDU or rack may do back to back before --power-on-rate applies")
	flag.StringVar(&c.powerGroups, "power-group-label", "pdu,rack", "node labels that name a node's power group, first present wins (none: one group)")
	flag.IntVar(&c.bmcInflight, "bmc-max-inflight", 2, "Redfish calls in flight per BMC")
	flag.IntVar(&c.bmcLogins, "bmc-max-logins", 64, "Redfish logins in flight over all BMCs")
	flag.DurationVar(&c.bmcIdle, "bmc-idle", 5*time.Minute, "a BMC session unused this long is logged out")
	flag.StringVar(&c.pprofListen, "pprof-listen", "", "serve Go's /debug/pprof on this address (loopback only, e.g. 127.0.0.1:6060; empty: off)")
	flag.DurationVar(&c.leaseTTL, "lease-ttl", store.DefaultLeaseTTL, "how long a run stays with an instance that stopped renewing its lease before another instance takes it over")
	flag.DurationVar(&c.statsEvery, "stats-every", time.Minute, "log the store's write statistics and the active runs this often")
	flag.StringVar(&c.instance, "instance-id", defaultInstanceID(), "this coordinator instance's name (leases, answers, logs); unique among instances sharing a database")
	flag.StringVar(&c.metricsListen, "metrics-listen", "127.0.0.1:9464", "serve /metrics, /healthz and /readyz on this address (empty: off; keep it off the provisioning network)")
	flag.StringVar(&c.webListen, "web-listen", "", "serve the web dashboard (TLS, operator client certificate required) on this address (empty: off)")
	flag.Var(&webhooks, "webhook", "POST a signed JSON notification to this URL when a run ends or needs attention (repeatable; docs/OBSERVABILITY.md)")
	flag.StringVar(&c.webhookSecret, "webhook-secret-file", "", "HMAC key of the webhook signature (default: webhook.secret in the state dir, created on first use)")
	flag.Var(&imports, "import-artifact", "file to add to the content-addressed artifact store (repeatable)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "provisioner-lite: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	c.imports = imports
	c.webhooks = webhooks
	c.eventLimits.HardEvents = c.eventLimits.MaxEvents + store.DefaultEventLimits.HardEvents - store.DefaultEventLimits.MaxEvents
	c.retention.BootTokens = store.DefaultRetention.BootTokens
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, c); err != nil {
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
	roleName := fs.String("role", string(pki.RoleViewer), "the operator's role: viewer (read), operator (provision, audit, verify, diagnostic, burn-in) or admin (also wipe)")
	fs.Parse(args)
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "pki: unexpected arguments %q\n", fs.Args())
		return 2
	}
	role, err := pki.ParseRole(*roleName)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := os.MkdirAll(*stateDir, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "pki:", err)
		return 1
	}
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
	oc, err := pki.IssueOperatorCert(pkiDir, *operator, role)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pki:", err)
		return 1
	}
	what := "reused"
	if oc.Issued {
		what = "issued"
	}
	fmt.Printf("operator %s (%s): certificate %s, key %s (%s, valid until %s)\n", oc.Name, oc.Role, oc.CertFile, oc.KeyFile, what, oc.NotAfter.Format(time.DateOnly))
	fmt.Printf("use: curectl --ca %s --cert %s --key %s ...\n", filepath.Join(pkiDir, pki.CACertFile), oc.CertFile, oc.KeyFile)
	return 0
}

func run(ctx context.Context, log *slog.Logger, c config) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()

	sd, err := statedir.Open(c.stateDir, log)
	if err != nil {
		return err
	}
	defer sd.Close()
	dsn := c.db
	if dsn == "" {
		dsn = sd.Join(statedir.DBFile)
	} else if !store.IsPostgresDSN(dsn) {
		return fmt.Errorf("--db %s: not a PostgreSQL DSN (postgres://… or host=… dbname=…); leave it empty for SQLite in the state dir", store.Redacted(dsn))
	}
	// Instances sharing a database must share the state key too (copy
	// state.key and pki/ca*.pem to each instance's state dir): the secrets
	// in the database are sealed with it.
	st, err := store.OpenDSN(dsn, store.WithStateKey(sd.Key), store.WithInstance(c.instance), store.WithLeaseTTL(c.leaseTTL))
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	obs := newObservability(st)
	notifier, err := newNotifier(c.webhooks, nonEmpty(c.webhookSecret, sd.Join("webhook.secret")), obs.m, log)
	if err != nil {
		return err
	}
	defer func() {
		// Queued webhooks get a few seconds; the rest are abandoned (logged).
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		notifier.Close(cctx)
	}()

	if c.nodesFile != "" {
		ns, err := nodes.Load(c.nodesFile)
		if err != nil {
			return err
		}
		for _, n := range ns {
			if n.BMCInsecure {
				log.Warn("BMC TLS verification is off for this node, as its inventory says: a peer on the BMC network can read its password",
					"node", n.ID, "bmc", n.BMCURL)
			}
			if err := st.UpsertNode(ctx, n); err != nil {
				return fmt.Errorf("import node %s: %w", n.ID, err)
			}
		}
		log.Info("node inventory imported", "file", c.nodesFile, "nodes", len(ns))
	}
	artifactDir := sd.Join("artifacts")
	for _, f := range c.imports {
		sum, size, err := bootserver.ImportArtifact(artifactDir, f)
		if err != nil {
			return fmt.Errorf("import artifact %s: %w", f, err)
		}
		log.Info("artifact imported", "file", f, "sha256", sum, "size", size)
	}

	_, httpPort, err := net.SplitHostPort(c.httpListen)
	if err != nil {
		return fmt.Errorf("--http-listen: %w", err)
	}
	_, grpcPort, err := net.SplitHostPort(c.grpcListen)
	if err != nil {
		return fmt.Errorf("--grpc-listen: %w", err)
	}
	baseURL := "http://" + net.JoinHostPort(c.advertise, httpPort)

	pkiDir := sd.Join("pki")
	if _, err := pki.EnsureCA(pkiDir); err != nil {
		return err
	}
	tlsCfg, err := pki.ServerTLSConfig(pkiDir, []string{c.advertise, "127.0.0.1", "localhost"})
	if err != nil {
		return err
	}

	bmcs, err := newBMCConnector(c.bmcCA, c.timeouts.BMCCall, log)
	if err != nil {
		return err
	}
	var groupKeys []string
	for _, k := range strings.Split(c.powerGroups, ",") {
		if k = strings.TrimSpace(k); k != "" {
			groupKeys = append(groupKeys, k)
		}
	}
	bmcPool := newBMCPool(bmcs, c.bmcIdle, c.bmcInflight, c.bmcLogins, &pacing.Pacer{Rate: c.powerRate, Burst: c.powerBurst}, groupKeys, log)
	bmcPool.onRetry = obs.m.RedfishHTTPRetry
	go bmcPool.run(ctx)
	rec := audit.New(st, log, 0)
	hub := sessions.NewHub()
	eng := pipeline.New(ctx, pipeline.Config{
		Store: st, Hub: hub, Log: log, Audit: rec,
		ConnectBMC:      bmcPool.connect,
		Manifests:       &pipeline.Catalog{Dir: c.manifestDir},
		ArtifactDir:     artifactDir,
		BaseURL:         baseURL,
		BMCBaseURL:      c.bmcBaseURL,
		RunnerAddr:      joinAddrs(nonEmpty(c.grpcAdv, net.JoinHostPort(c.advertise, grpcPort)), c.peerGRPC),
		Timeouts:        c.timeouts,
		Budgets:         c.budgets,
		TokensPerWindow: c.tokensPerWindow,
		MaxRuns:         c.maxRuns,
		Metrics:         obs.m,
		Notify:          runNotice(notifier),
	})

	bs, err := bootserver.New(bootserver.Config{ImageDir: c.imageDir, ArtifactDir: artifactDir, BaseURL: baseURL, Logger: log,
		Limits: bootserver.Limits{MaxConns: c.httpMaxConns}, Served: obs.m.ArtifactServed}, eng)
	if err != nil {
		return err
	}
	httpSrv := bs.HTTPServer()
	hl, err := net.Listen("tcp", c.httpListen)
	if err != nil {
		return err
	}

	// Runners and operators share the listener: TLS verifies a client
	// certificate when one is sent, and OperatorAuth lets only the runner
	// session through without an operator certificate.
	opts := append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}, server.ServerOptions(server.Limits{})...)
	opts = append(opts, server.OperatorAuth(rec, log)...)
	gs := grpc.NewServer(opts...)
	curev1.RegisterRunnerServiceServer(gs, &server.RunnerService{Store: st, Hub: hub, Log: log, Audit: rec, Guard: eng, Instance: c.instance,
		BindPeer: c.bindBootIP, Limits: c.eventLimits, Metrics: obs.m})
	curev1.RegisterOperatorServiceServer(gs, &server.OperatorService{Store: st, Starter: eng, Auditor: eng, Canceler: eng, Instance: c.instance})
	gl, err := net.Listen("tcp", c.grpcListen)
	if err != nil {
		hl.Close()
		return err
	}

	errc := make(chan error, 2)
	go func() { errc <- httpSrv.Serve(bs.Listener(hl)) }()
	go func() { errc <- gs.Serve(netutil.LimitListener(gl, c.grpcMaxConns)) }()
	obs.h.Listener("http", true)
	obs.h.Listener("grpc", true)
	if err := obs.serve(ctx, c.metricsListen, log); err != nil {
		return err
	}
	if err := obs.serveDashboard(ctx, c.webListen, tlsCfg, st, log); err != nil {
		return err
	}
	go st.Maintain(ctx, 10*time.Minute, c.retention, log)
	n, err := eng.Resume(ctx)
	if err != nil && ctx.Err() == nil {
		return err
	}
	if c.pprofListen != "" {
		if err := servePprof(ctx, c.pprofListen, log); err != nil {
			return err
		}
	}
	go eng.RunLeases(ctx)
	go func() {
		if c.statsEvery <= 0 {
			return // --stats-every 0: no periodic statistics
		}
		t := time.NewTicker(c.statsEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				logStats(log, st, eng)
			}
		}
	}()
	log.Info("provisioner-lite ready", "instance", c.instance, "db", st.Path(), "http", c.httpListen, "grpc", c.grpcListen, "advertise", c.advertise, "resumed_runs", n, "state", sd.Path)

	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("server", "err", err)
		}
	}
	obs.h.ShuttingDown()
	log.Info("shutting down; active runs resume at next start")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = httpSrv.Shutdown(sctx)
	gs.Stop()
	stop()
	eng.Wait()
	// Hand the interrupted runs' leases back: a peer instance (or this one,
	// restarted) takes them over at once instead of after the lease TTL.
	eng.ReleaseAll(sctx)
	logStats(log, st, eng)
	return nil
}

// defaultInstanceID is the host name: stable across restarts, so a restarted
// instance takes its own runs back at once instead of waiting for their leases.
func defaultInstanceID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "cure-1"
	}
	return h
}

// logStats logs the store's cumulative write counters (the fleet simulator
// reads commits= from the last line of each process).
func logStats(log *slog.Logger, st *store.Store, eng *pipeline.Engine) {
	s := st.Stats()
	var avg time.Duration
	if s.Commits > 0 {
		avg = s.CommitTime / time.Duration(s.Commits)
	}
	log.Info("store stats", "commits", s.Commits, "ops", s.Ops, "batched_ops", s.BatchedOps, "max_batch", s.MaxBatch,
		"failed_commits", s.FailedCommits, "commit_avg", avg, "active_runs", eng.Active())
}

// joinAddrs is the cure.coordinator list: this instance first, then its peers.
func joinAddrs(own, peers string) string {
	out := []string{own}
	for _, p := range strings.Split(peers, ",") {
		if p = strings.TrimSpace(p); p != "" && p != own {
			out = append(out, p)
		}
	}
	return strings.Join(out, ",")
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
