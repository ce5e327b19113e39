package coordinator

import (
	"net"
	"strings"
	"testing"
)

// The listeners that are on share the descriptors left after the reserve;
// caps set by flag that do not fit stop the start, naming the flag.
func TestPlanListeners(t *testing.T) {
	limit, err := nofileLimit()
	if err != nil || limit <= 0 {
		t.Fatalf("nofileLimit = %d, %v", limit, err)
	}
	c := Config{BMCMaxLogins: 64, WebListen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0"}
	for _, limit := range []int{256, 1024, 65536, 1 << 20} {
		p, err := planListeners(c, limit)
		if err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		sum := 2*p.http.Conns + p.grpc.Conns + p.web.Conns + p.metrics.Conns
		if sum > limit-fdReserve(limit, 64) || sum != p.budget.Listeners {
			t.Errorf("limit %d: the listeners may hold %d descriptors (budget says %d), reserve %d", limit, sum, p.budget.Listeners, fdReserve(limit, 64))
		}
		if p.http.PerSource < 1 || p.http.PerSource > p.http.Conns || p.web.PerSource > p.web.Conns {
			t.Errorf("limit %d: per-source caps %+v", limit, p)
		}
	}
	if p, _ := planListeners(c, 1<<20); p.http.Conns != 4096 || p.grpc.Conns != 8192 || p.web.Conns != 256 || p.metrics.Conns != 64 {
		t.Errorf("plentiful descriptors: %+v, want the defaults", p)
	}
	// Listeners that are off take nothing.
	off := Config{BMCMaxLogins: 64}
	if p, _ := planListeners(off, 1024); p.web.Conns != 0 || p.metrics.Conns != 0 || p.http.Conns <= 0 {
		t.Errorf("dashboard and metrics off: %+v", p)
	}
	c.Conns.HTTPConns = 4096
	if _, err := planListeners(c, 4096); err == nil || !strings.Contains(err.Error(), "refusing to start") ||
		!strings.Contains(err.Error(), "--http-max-conns 4096") || !strings.Contains(err.Error(), "LimitNOFILE") {
		t.Fatalf("--http-max-conns beyond the limit: %v", err)
	}
}

// The HTTPS boot listener has its own share of the descriptors: with every
// listener on and full at once (a boot connection, plain or HTTPS, holding
// a file too), the process stays under its limit; the listener main wraps
// around it carries that share, not the plain boot listener's caps; a cap
// set by flag that does not fit stops the start, naming the flag.
func TestHTTPSListenerInBudget(t *testing.T) {
	c := Config{BMCMaxLogins: 64, WebListen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", HTTPSListen: "127.0.0.1:0"}
	for _, limit := range []int{256, 1024, 65536, 1 << 20} {
		p, err := planListeners(c, limit)
		if err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		if p.https.Conns < 4 || p.https.PerSource < 1 || p.https.PerSource > p.https.Conns {
			t.Fatalf("limit %d: https caps %+v", limit, p.https)
		}
		sum := 2*p.http.Conns + 2*p.https.Conns + p.grpc.Conns + p.web.Conns + p.metrics.Conns
		if sum > limit-fdReserve(limit, 64) || sum != p.budget.Listeners {
			t.Errorf("limit %d: every listener full holds %d descriptors (budget says %d), %d available", limit, sum, p.budget.Listeners, limit-fdReserve(limit, 64))
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		got := httpsBootListener(ln, p, quiet()).Config()
		ln.Close()
		if got.MaxConns != p.https.Conns || got.MaxPerSource != p.https.PerSource || got.Silent <= 0 {
			t.Errorf("limit %d: the HTTPS boot listener is capped at %d (%d per source, silent %v), its share is %+v",
				limit, got.MaxConns, got.MaxPerSource, got.Silent, p.https)
		}
	}
	if p, _ := planListeners(Config{BMCMaxLogins: 64}, 1024); p.https.Conns != 0 {
		t.Errorf("no --https-listen: https takes %+v", p.https)
	}
	c.Conns.HTTPSConns = 4096
	if _, err := planListeners(c, 4096); err == nil || !strings.Contains(err.Error(), "--https-max-conns 4096 (8192 descriptors)") {
		t.Fatalf("--https-max-conns beyond the limit: %v", err)
	}
}
