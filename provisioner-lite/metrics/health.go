package metrics

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Health answers /healthz (the process serves HTTP) and /readyz (the store
// takes a write, every listener is up, the coordinator is not shutting
// down). A load balancer or orchestrator uses /readyz to send work only to
// an instance that can take it.
type Health struct {
	// StoreCheck proves the store writable (store.Store.Ping); nil: not checked.
	StoreCheck func(ctx context.Context) error
	// CacheFor reuses a store check's result this long (default 2s), so
	// probes cannot load the database.
	CacheFor time.Duration

	mu        sync.Mutex
	listeners map[string]bool
	checked   time.Time
	storeErr  error
	stopping  atomic.Bool
}

// Listener records whether a listener (by name: http, grpc, web, metrics)
// is serving. A listener named once must be up for readiness.
func (h *Health) Listener(name string, up bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.listeners == nil {
		h.listeners = map[string]bool{}
	}
	h.listeners[name] = up
}

// ShuttingDown makes /readyz fail from now on.
func (h *Health) ShuttingDown() { h.stopping.Store(true) }

// Ready returns nil when the instance can take work, or what is wrong.
func (h *Health) Ready(ctx context.Context) error {
	var problems []string
	if h.stopping.Load() {
		problems = append(problems, "shutting down")
	}
	h.mu.Lock()
	var down []string
	for name, up := range h.listeners {
		if !up {
			down = append(down, name)
		}
	}
	cache := h.CacheFor
	if cache <= 0 {
		cache = 2 * time.Second
	}
	check := h.StoreCheck != nil && time.Since(h.checked) >= cache
	storeErr := h.storeErr
	h.mu.Unlock()
	sort.Strings(down)
	for _, n := range down {
		problems = append(problems, "listener "+n+" not serving")
	}
	if check {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		storeErr = h.StoreCheck(cctx)
		cancel()
		h.mu.Lock()
		h.checked, h.storeErr = time.Now(), storeErr
		h.mu.Unlock()
	}
	if storeErr != nil {
		problems = append(problems, "store not writable: "+storeErr.Error())
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

// Healthz answers 200 while the process serves.
func (h *Health) Healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprintln(w, "ok")
}

// Readyz answers 200 when Ready, 503 with the reasons otherwise.
func (h *Health) Readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := h.Ready(r.Context()); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready:", err)
		return
	}
	fmt.Fprintln(w, "ready")
}

// Mux serves /metrics, /healthz and /readyz.
func Mux(m *Metrics, h *Health) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("GET /healthz", h.Healthz)
	mux.HandleFunc("GET /readyz", h.Readyz)
	return mux
}

// Server is the http.Server for Mux with the limits every listener of the
// coordinator has.
func Server(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10}
}
