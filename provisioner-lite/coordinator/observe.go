package coordinator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/admission"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/dashboard"
	"github.com/cure-oss/cure/provisioner-lite/peerlimit"
	"github.com/cure-oss/cure/provisioner-lite/runstate"

	"github.com/cure-oss/cure/provisioner-lite/metrics"
	"github.com/cure-oss/cure/provisioner-lite/notify"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/pool"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// observability is the coordinator's metrics and health state.
type observability struct {
	m *metrics.Metrics
	h *metrics.Health
	// admission is a node's standing with its SKU's admission (the
	// dashboard's node page); nil: not shown.
	admission func(ctx context.Context, nodeID string) (*admission.Result, error)
}

// newObservability creates the metrics and hooks the store into them.
func newObservability(st *store.Store) *observability {
	m := metrics.New(metrics.Options{})
	st.ObserveCommits(m.StoreCommit)
	return &observability{m: m, h: &metrics.Health{StoreCheck: st.Ping}}
}

// serve starts /metrics, /healthz and /readyz on addr (empty: off), its
// connections capped. A non-loopback address is allowed (Prometheus
// usually scrapes from another host) but warned about: the metrics name
// nodes and runs, and the provisioning network is hostile
// (docs/SECURITY.md). The listener is nil when off or not started.
func (o *observability) serve(ctx context.Context, addr string, caps peerlimit.Caps, log *slog.Logger) (*peerlimit.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		log.Warn("metrics listener is not on loopback: keep it off the provisioning network (firewall it to the Prometheus host)", "addr", addr)
	}
	inner, err := net.Listen("tcp", addr)
	if err != nil {
		// Not fatal: provisioning goes on without metrics (several
		// instances on one host share the default port).
		log.Error("metrics listener not started", "addr", addr, "err", err)
		return nil, nil
	}
	ln := limited(inner, "metrics", caps, log)
	srv := metrics.Server(metrics.Mux(o.m, o.h))
	srv.ErrorLog = peerlimit.HTTPErrorLog(ln.Config().Refusals, log)
	o.h.Listener("metrics", true)
	go func() {
		if err := srv.Serve(ln); err != nil {
			o.h.Listener("metrics", false)
		}
	}()
	go func() { <-ctx.Done(); srv.Close() }()
	log.Info("metrics listening", "addr", ln.Addr().String())
	return ln, nil
}

// newNotifier starts the webhook notifier (nil without --webhook). The
// secret lives in the state dir beside the other secrets unless
// --webhook-secret-file names another file.
func newNotifier(urls []string, secretFile string, m *metrics.Metrics, log *slog.Logger) (*notify.Notifier, error) {
	if len(urls) == 0 {
		return nil, nil
	}
	secret, err := notify.LoadSecret(secretFile, log)
	if err != nil {
		return nil, err
	}
	return notify.New(notify.Config{URLs: urls, Secret: secret, Log: log, Result: m.Webhook})
}

// runNotice turns a finished run into a webhook (pipeline.Config.Notify)
// and hands it to also (the pool).
func runNotice(n *notify.Notifier, also func(pipeline.RunNotice)) func(pipeline.RunNotice) {
	return func(rn pipeline.RunNotice) {
		if n != nil {
			r := rn.Run
			ev := notify.EventRunEnded
			if r.Status == curev1.RunStatus_RUN_ATTENTION {
				ev = notify.EventRunAttention
			}
			n.Notify(notify.Payload{Event: ev, RunID: r.ID, NodeID: r.NodeID, SKU: rn.SKU, Mode: string(r.Mode), Status: runstate.RunName(r.Status), Phase: string(r.Phase),
				Message: r.Message, Reboots: r.Reboots, StartedAt: r.StartedAt, EndedAt: r.EndedAt})
		}
		if also != nil {
			also(rn)
		}
	}
}

// poolNotice turns a pool move into a node.pool webhook (nil without
// --webhook: nothing to announce to).
func poolNotice(n *notify.Notifier) func(pool.Change) {
	if n == nil {
		return nil
	}
	return func(c pool.Change) { n.Notify(c.Payload()) }
}

// suiteCheck refuses a revalidation whose suite does not load as a
// ValidationSuite.
func suiteCheck(c *catalog.Catalog) func(string) error {
	return func(name string) error {
		_, doc, err := c.LoadDocument(name)
		if err != nil {
			return err
		}
		if doc.Suite == nil {
			return fmt.Errorf("revalidation needs a ValidationSuite; %s is a %s", name, doc.Kind)
		}
		return nil
	}
}

// serveDashboard serves the web dashboard on addr (empty: off) over TLS
// with the coordinator's server certificate, requiring an operator client
// certificate from its CA: operators sign in as they do with curectl. Its
// connections and live streams are capped; a peer that does not finish
// its TLS handshake within ReadHeaderTimeout (Go's http.Server uses it as
// the handshake deadline) is cut, one that sends nothing sooner.
func (o *observability) serveDashboard(ctx context.Context, addr string, tlsCfg *tls.Config, st *store.Store, caps peerlimit.Caps, f ConnLimits,
	log *slog.Logger) (*peerlimit.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	inner, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--web-listen: %w", err)
	}
	ln := limited(inner, "web", caps, log)
	h := dashboard.Handler(dashboard.Config{Store: st, Auth: dashboard.CertViewer, Log: log,
		MaxStreams: f.WebStreams, MaxStreamsPerViewer: f.WebStreamsPerOperator, Observer: o.m, Admission: o.admission})
	srv := &http.Server{Handler: h, TLSConfig: dashboard.TLSConfig(tlsCfg), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 16 << 10, ErrorLog: peerlimit.HTTPErrorLog(ln.Config().Refusals, log)}
	o.h.Listener("web", true)
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("dashboard", "err", err)
			o.h.Listener("web", false)
		}
	}()
	go func() { <-ctx.Done(); srv.Close() }()
	log.Info("dashboard listening", "addr", ln.Addr().String())
	return ln, nil
}

// poolAdmission is the dashboard's view of a node's admission: nil when
// its SKU has none.
func poolAdmission(p *pool.Pool) func(ctx context.Context, nodeID string) (*admission.Result, error) {
	return func(ctx context.Context, nodeID string) (*admission.Result, error) {
		st, err := p.Standing(ctx, nodeID)
		if err != nil || st.Policy == nil {
			return nil, err
		}
		return &st.Result, nil
	}
}
