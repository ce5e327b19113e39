package coordinator

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/attestpolicy"
	"github.com/cure-oss/cure/provisioner-lite/bootserver"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/peerlimit"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/pool"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/sitecheck"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// services are the engine, the pool and the servers wired to them.
type services struct {
	catalog  *catalog.Catalog
	eng      *pipeline.Engine
	nodePool *pool.Pool
	bs       *bootserver.Server
	httpSrv  *http.Server
	gs       *grpc.Server

	errc                                      chan error // a server that stopped serving
	bootLn, grpcLn, httpsLn, metricsLn, webLn *peerlimit.Listener
	resumed                                   int
	shutDown                                  bool // shutdown ran
}

// wire builds the engine, the node pool, the boot server and the gRPC
// services on the store.
func (d *daemon) wire(ctx context.Context) error {
	c, log := &d.c, d.log
	hub := sessions.NewHub()
	d.catalog = &catalog.Catalog{Dir: c.ManifestDir}
	// The pool hears every run's end and starts revalidation runs: it and
	// the engine refer to each other, the engine's hook is set first.
	var nodePool *pool.Pool
	enlister := d.newEnlister()
	d.eng = pipeline.New(ctx, pipeline.Config{
		Store: d.st, Hub: hub, Log: log, Audit: d.rec,
		ConnectBMC:      d.bmcPool.Connect,
		Manifests:       d.catalog,
		ArtifactDir:     d.artifactDir,
		BaseURL:         d.baseURL,
		BMCBaseURL:      c.BMCBaseURL,
		RunnerAddr:      joinAddrs(nonEmpty(c.AdvertiseGRPC, net.JoinHostPort(c.Advertise, listenerPort(d.gl))), c.PeerGRPC),
		Timeouts:        c.Timeouts,
		Budgets:         c.Budgets,
		TokensPerWindow: c.TokensPerWindow,
		ClaimSettle:     c.ClaimSettle,
		BootIPUnbound:   !c.BindBootIP,
		Enlist:          enlistBoot(enlister),
		MaxRuns:         c.MaxRuns,
		NetBoot:         d.nb.target,
		Metrics:         d.obs.m,
		Notify:          runNotice(d.notifier, func(rn pipeline.RunNotice) { nodePool.RunEnded(ctx, rn.Run) }),
		// A judgement that failed, or a day-0 run whose band filled
		// without a later judgement of its SKU, is judged again within a
		// minute (the pool then releases or quarantines the node).
		FleetSweep: time.Minute,
		OnFleetRejudged: func(ctx context.Context, nodeID, runID string, marginal bool, reason string) {
			nodePool.FleetRejudged(ctx, nodeID, runID, marginal, reason)
		},
		ToolBundle:    d.toolBundle,
		FetchArtifact: d.fill(),
	})
	nodePool = pool.New(pool.Config{Store: d.st, Starter: d.eng, Announce: poolNotice(d.notifier), CheckSuite: suiteCheck(d.catalog),
		Policies: d.catalog, Metrics: d.obs.m, Log: log})
	d.nodePool = nodePool

	var err error
	d.bs, err = bootserver.New(bootserver.Config{ImageDir: c.ImageDir, ArtifactDir: d.artifactDir, BaseURL: d.baseURL, Logger: log,
		Limits:     bootserver.Limits{MaxConns: d.plan.http.Conns, MaxConnsPerSource: d.plan.http.PerSource},
		IPXEBuilds: d.nb.builds(), Served: d.obs.m.ArtifactServed, Fill: d.fill(),
		ImageDirs: c.imageDirs(), NodeArch: nodeArch(d.st, d.catalog)}, d.eng)
	if err != nil {
		return err
	}
	d.httpSrv = d.bs.HTTPServer()

	// Runners and operators share the listener: TLS verifies a client
	// certificate when one is sent, and OperatorAuth lets only the runner
	// session through without an operator certificate.
	opts := append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(d.tlsCfg))}, server.ServerOptions(server.Limits{})...)
	opts = append(opts, server.OperatorAuth(d.rec, log)...)
	d.gs = grpc.NewServer(opts...)
	curev1.RegisterRunnerServiceServer(d.gs, &server.RunnerService{Store: d.st, Hub: hub, Log: log, Audit: d.rec, Guard: d.eng, Instance: c.Instance,
		BindPeer: c.BindBootIP, Limits: c.EventLimits, Metrics: d.obs.m, Attestation: &attestpolicy.Policy{Catalog: d.catalog, ImageDir: c.ImageDir, Log: log},
		EKRoots: d.ekRoots, OnMeasurementDrift: quarantineOnDrift(nodePool, log), Enlist: enlister})
	curev1.RegisterOperatorServiceServer(d.gs, &server.OperatorService{Store: d.st, Starter: d.eng, Auditor: d.eng, Canceler: d.eng, OSBooter: d.eng, Pool: nodePool,
		Instance: c.Instance, KnownSKU: sitecheck.KnownSKU(c.ManifestDir), BMCCADir: d.sd.Join("bmc-ca"), Log: log,
		Manifests: d.catalog, ManifestBundle: d.shared.bundle.Load, Enlist: enlister,
		OnMeasurementsAccepted: reconsiderOnAccept(nodePool, log)})
	return nil
}

// serve starts the network boot front door and the servers on their
// listeners, resumes the store's runs and starts the background work.
func (d *daemon) serve(ctx context.Context) error {
	c, log := &d.c, d.log
	d.errc = make(chan error, 4)
	d.tuneMemory(ctx) // before the listeners: the fleet's sessions come under the plan
	d.nb.onUnknownMAC = func(ctx context.Context, mac, source string) { d.eng.UnknownMAC(ctx, mac, "proxy DHCP", source) }
	d.nb.standby = d.frontDoorStandby
	d.onClose(d.releaseFrontDoor)
	go d.runShared(ctx)
	stopNetboot, err := d.nb.start(ctx, log, d.bs.ScriptURL(), d.baseURL, d.st, d.errc)
	if err != nil {
		return err
	}
	d.onClose(stopNetboot)
	d.serving = true
	// A start that fails from here on stops the servers it started (a
	// shutdown has stopped them already).
	d.onClose(func() {
		if !d.shutDown {
			d.httpSrv.Close()
			d.gs.Stop()
		}
	})
	d.bootLn, d.grpcLn = d.bs.Listener(d.hl), limited(d.gl, "grpc", d.plan.grpc, log)
	go func() { d.errc <- d.httpSrv.Serve(d.bootLn) }()
	go func() { d.errc <- d.gs.Serve(d.grpcLn) }()
	if d.htl != nil {
		httpsSrv := d.bs.HTTPServer()
		d.httpsLn = httpsBootListener(d.htl, d.plan, log)
		go func() { d.errc <- httpsSrv.Serve(tls.NewListener(d.httpsLn, d.httpsCfg)) }()
		d.onClose(func() { httpsSrv.Close() })
		log.Info("HTTPS boot listener", "addr", d.htl.Addr().String(), "url", d.httpsURL, "http_boot_uri", d.bmcs.HTTPBootURI)
	}
	d.obs.h.Listener("http", true)
	d.obs.h.Listener("grpc", true)
	if d.metricsLn, err = d.obs.serve(ctx, c.MetricsListen, d.plan.metrics, log); err != nil {
		return err
	}
	d.obs.admission = poolAdmission(d.nodePool)
	if d.webLn, err = d.obs.serveDashboard(ctx, c.WebListen, d.tlsCfg, d.st, d.plan.web, c.Conns, log); err != nil {
		return err
	}
	c.Retention.Fleet = fleetRetention(c.Retention.Fleet, c.ManifestDir, d.site.Suites, log)
	go flushRefusals(ctx, 10*time.Second, d.bootLn, d.httpsLn, d.grpcLn, d.metricsLn, d.webLn)
	go d.st.Maintain(ctx, 10*time.Minute, c.Retention, log)
	if d.resumed, err = d.eng.Resume(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	if c.PprofListen != "" {
		if err := servePprof(ctx, c.PprofListen, log); err != nil {
			return err
		}
	}
	go d.eng.RunLeases(ctx)
	go d.nodePool.Run(ctx, time.Minute)
	go d.logStatsEvery(ctx)
	log.Info("provisioner-lite ready", "instance", c.Instance, "db", d.st.Path(), "http", d.hl.Addr().String(), "grpc", d.gl.Addr().String(),
		"advertise", c.Advertise, "resumed_runs", d.resumed, "state", d.sd.Path)
	return nil
}

// logStatsEvery logs the store's statistics every StatsEvery (0: never).
func (d *daemon) logStatsEvery(ctx context.Context) {
	if d.c.StatsEvery <= 0 {
		return
	}
	t := time.NewTicker(d.c.StatsEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			logStats(d.log, d.st, d.eng)
		}
	}
}

// wait returns when ctx ends or a server stops serving.
func (d *daemon) wait(ctx context.Context) {
	select {
	case <-ctx.Done():
	case err := <-d.errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("server", "err", err)
		}
	}
}

// shutdown stops the servers and the engine; cleanup closes the rest.
func (d *daemon) shutdown() {
	d.shutDown = true
	d.obs.h.ShuttingDown()
	d.log.Info("shutting down; active runs resume at next start")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = d.httpSrv.Shutdown(sctx)
	d.gs.Stop()
	d.stop()
	d.eng.Wait()
	// Hand the interrupted runs' leases back: a peer instance (or this one,
	// restarted) takes them over at once instead of after the lease TTL.
	d.eng.ReleaseAll(sctx)
	logStats(d.log, d.st, d.eng)
}

// addrs are the bound listeners' addresses.
func (d *daemon) addrs() Addrs {
	a := Addrs{HTTP: d.hl.Addr().String(), GRPC: d.gl.Addr().String()}
	if d.htl != nil {
		a.HTTPS = d.htl.Addr().String()
	}
	if d.metricsLn != nil {
		a.Metrics = d.metricsLn.Addr().String()
	}
	if d.webLn != nil {
		a.Web = d.webLn.Addr().String()
	}
	return a
}
