package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/peerlimit"
)

// silentConn closes a connection to the gRPC, dashboard or metrics
// listener whose peer sent nothing this long: each of their clients speaks
// first (a TLS ClientHello, an HTTP request line). The boot server has its
// own, the same (bootserver.Limits.Silent).
const silentConn = 5 * time.Second

// ConnLimits are the listeners' connection caps (0: derived from the file
// descriptor limit, docs/SECURITY.md), and the dashboard's live streams.
type ConnLimits struct {
	HTTPConns, HTTPPerSource       int // --http-max-conns, --http-max-conns-per-source
	HTTPSConns, HTTPSPerSource     int // --https-max-conns, --https-max-conns-per-source
	GRPCConns, GRPCPerSource       int // --grpc-max-conns, --grpc-max-conns-per-source
	WebConns, WebPerSource         int // --web-max-conns, --web-max-conns-per-source
	MetricsConns, MetricsPerSource int // --metrics-max-conns, --metrics-max-conns-per-source
	// WebStreams (default 64) and WebStreamsPerOperator (default 8) are
	// the dashboard's live streams in all and of one operator certificate.
	WebStreams, WebStreamsPerOperator int
}

// listenerPlan is the caps of the listeners this coordinator opens.
type listenerPlan struct {
	budget                          peerlimit.Budget
	http, https, grpc, web, metrics peerlimit.Caps
}

// nofileLimit is the process's file descriptor limit (the soft
// RLIMIT_NOFILE, which Go raises to the hard limit at start).
func nofileLimit() (int, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	return int(min(rl.Cur, 1<<24)), nil
}

// fdReserve is what the listeners leave to the rest of the process: the
// store's connections and files, BMC sessions (up to --bmc-max-logins
// logging in at once, and their kept-alive connections), webhooks, TFTP
// transfers, artifact imports and logs. A quarter of the limit, and never
// less than 128 plus the BMC logins.
func fdReserve(limit, bmcLogins int) int { return max(limit/4, 128+bmcLogins) }

// planListeners splits the descriptors left after fdReserve among the
// listeners that are on (peerlimit.SplitFDs): caps given by flags are
// kept, the others derived. A boot connection, plain or HTTPS, may hold a
// file as well as its socket. The HTTPS boot listener has a share of its
// own: wrapped in the plain listener's caps it could hold as much again,
// and all listeners full would pass the limit.
func planListeners(c Config, limit int) (listenerPlan, error) {
	f := c.Conns
	shares := []peerlimit.Share{
		{Name: "http", Flag: "--http-max-conns", Conns: f.HTTPConns, PerSource: f.HTTPPerSource, DefaultConns: 4096, MinConns: 16, DefaultPerSource: 32, FDsPerConn: 2},
		{Name: "grpc", Flag: "--grpc-max-conns", Conns: f.GRPCConns, PerSource: f.GRPCPerSource, DefaultConns: 8192, MinConns: 16, DefaultPerSource: 64, FDsPerConn: 1},
	}
	if c.HTTPSListen != "" {
		// UEFI HTTP boot: one download of the signed image per booting node.
		shares = append(shares, peerlimit.Share{Name: "https", Flag: "--https-max-conns", Conns: f.HTTPSConns, PerSource: f.HTTPSPerSource,
			DefaultConns: 1024, MinConns: 4, DefaultPerSource: 8, FDsPerConn: 2})
	}
	if c.WebListen != "" {
		shares = append(shares, peerlimit.Share{Name: "web", Flag: "--web-max-conns", Conns: f.WebConns, PerSource: f.WebPerSource,
			DefaultConns: 256, MinConns: 4, DefaultPerSource: 16, FDsPerConn: 1})
	}
	if c.MetricsListen != "" {
		shares = append(shares, peerlimit.Share{Name: "metrics", Flag: "--metrics-max-conns", Conns: f.MetricsConns, PerSource: f.MetricsPerSource,
			DefaultConns: 64, MinConns: 2, DefaultPerSource: 4, FDsPerConn: 1})
	}
	b, err := peerlimit.SplitFDs(limit, fdReserve(limit, c.BMCMaxLogins), shares)
	if err != nil {
		return listenerPlan{}, fmt.Errorf("refusing to start: %w", err)
	}
	p := listenerPlan{budget: b}
	for i, s := range shares {
		switch s.Name {
		case "http":
			p.http = b.Caps[i]
		case "https":
			p.https = b.Caps[i]
		case "grpc":
			p.grpc = b.Caps[i]
		case "web":
			p.web = b.Caps[i]
		case "metrics":
			p.metrics = b.Caps[i]
		}
	}
	return p, nil
}

func (p listenerPlan) log(log *slog.Logger) {
	caps := func(c peerlimit.Caps) string {
		if c.Conns == 0 {
			return "off"
		}
		return fmt.Sprintf("%d (%d per source)", c.Conns, c.PerSource)
	}
	log.Info("connection caps", "fd_limit", p.budget.Limit, "fd_reserved", p.budget.Reserve, "fd_listeners", p.budget.Listeners,
		"http", caps(p.http), "https", caps(p.https), "grpc", caps(p.grpc), "web", caps(p.web), "metrics", caps(p.metrics))
}

// limited wraps a listener in its caps, refusals logged as listener name.
func limited(ln net.Listener, name string, c peerlimit.Caps, log *slog.Logger) *peerlimit.Listener {
	return peerlimit.NewListener(ln, peerlimit.ListenerConfig{MaxConns: c.Conns, MaxPerSource: c.PerSource, Silent: silentConn,
		Refusals: peerlimit.NewRefusals(log, name, slog.LevelWarn, 0)})
}

// httpsBootListener wraps the HTTPS boot listener in its own share of the
// descriptors (plan.https), never the plain boot listener's caps.
func httpsBootListener(ln net.Listener, p listenerPlan, log *slog.Logger) *peerlimit.Listener {
	return limited(ln, "https", p.https, log)
}

// flushRefusals logs the listeners' pending refusal summaries every
// interval, so a flood that stopped is still reported, and once more at
// the end.
// A listener that is off is nil.
func flushRefusals(ctx context.Context, every time.Duration, ls ...*peerlimit.Listener) {
	flush := func() {
		for _, l := range ls {
			if l != nil {
				l.Flush()
			}
		}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			flush()
			return
		case <-t.C:
			flush()
		}
	}
}
