// Package bootserver is the HTTP server nodes boot from: the generic and per-MAC
// iPXE scripts, the CURE kernel and initramfs, content-addressed artifacts (with
// Range support, for resumable image streaming) and the installed OS's
// "ready" callback. Decisions (boot CURE or fall through to disk, token checks)
// belong to the Coordinator; this package only speaks HTTP and iPXE.
package bootserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Decision is the coordinator's answer for one booting NIC.
type Decision struct {
	Boot    bool   // false → iPXE `exit` so firmware falls through to the next boot device (disk)
	Cmdline string // extra kernel args incl. cure.token=..., cure.node=...
	Reason  string // shown on the console either way
}

// Coordinator makes the decisions the boot server serves.
type Coordinator interface {
	// BootDecision answers for a MAC (lowercase, colon-separated). An error
	// wrapping ErrUnknownNode (or store.ErrNotFound) becomes a 404.
	BootDecision(ctx context.Context, mac string) (Decision, error)
	// HostReady records that the installed OS phoned home. An error wrapping
	// ErrUnauthorized (or store.ErrNotFound / store.ErrExpired for the token)
	// becomes a 401; ErrUnknownNode a 404.
	HostReady(ctx context.Context, nodeID, token string, form url.Values) error
}

// Errors a Coordinator wraps to choose the HTTP status.
var (
	ErrUnknownNode  = errors.New("unknown node")
	ErrUnauthorized = errors.New("unauthorized")
)

// Config configures a Server.
type Config struct {
	ImageDir    string // vmlinuz, initramfs.cpio.gz (and .zst) from cure-build
	ArtifactDir string // content-addressed: <ArtifactDir>/sha256/<hex>
	BaseURL     string // as nodes reach us, e.g. http://10.0.2.2:8080
	Logger      *slog.Logger
}

// Server serves the boot routes. Create it with New.
type Server struct {
	cfg  Config
	base string // BaseURL without trailing slash
	c    Coordinator
	log  *slog.Logger
	h    http.Handler
}

// Image file names served under /image/.
const (
	Kernel        = "vmlinuz"
	InitramfsGzip = "initramfs.cpio.gz"
	InitramfsZstd = "initramfs.cpio.zst"
)

// decisionTimeout bounds the coordinator's work per iPXE request: iPXE's own
// HTTP timeout is short, and a hung store must not hang a booting node.
const decisionTimeout = 15 * time.Second

// New validates cfg and builds the server.
func New(cfg Config, c Coordinator) (*Server, error) {
	if c == nil {
		return nil, errors.New("bootserver: nil Coordinator")
	}
	if cfg.ImageDir == "" {
		return nil, errors.New("bootserver: Config.ImageDir is empty: want the directory holding vmlinuz and initramfs.cpio.gz")
	}
	if cfg.ArtifactDir == "" {
		return nil, errors.New("bootserver: Config.ArtifactDir is empty: want the content-addressed artifact directory")
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("bootserver: Config.BaseURL %q: want http(s)://host[:port][/prefix] as nodes reach this server", cfg.BaseURL)
	}
	if strings.ContainsAny(cfg.BaseURL, " \t\r\n$") {
		return nil, fmt.Errorf("bootserver: Config.BaseURL %q: whitespace or '$' would break the iPXE script", cfg.BaseURL)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, base: strings.TrimRight(cfg.BaseURL, "/"), c: c, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /boot.ipxe", s.generic)
	mux.HandleFunc("GET /ipxe/{mac}", s.perMAC)
	mux.HandleFunc("GET /image/{name}", s.image)
	mux.HandleFunc("GET /artifacts/sha256/{hex}", s.artifact)
	mux.HandleFunc("POST /v1/nodes/{id}/ready", s.ready)
	s.h = s.logRequests(mux)
	return s, nil
}

// Handler returns the server's routes wrapped in request logging. GET routes also answer HEAD.
func (s *Server) Handler() http.Handler { return s.h }

// ArtifactURL is where nodes fetch the artifact with that sha256.
func (s *Server) ArtifactURL(sha256hex string) string {
	return s.base + "/artifacts/sha256/" + strings.ToLower(sha256hex)
}

// ImageURL is where nodes fetch an image file (Kernel, InitramfsGzip, InitramfsZstd).
func (s *Server) ImageURL(name string) string { return s.base + "/image/" + name }

// --- iPXE scripts ---

// maxTries bounds the generic script's retries before it gives up and lets the
// firmware try the next boot device, so a node whose coordinator is down does not
// loop in PXE forever.
const maxTries = 5

func (s *Server) generic(w http.ResponseWriter, r *http.Request) {
	// ${netX/mac} is the NIC iPXE booted from (plain ${mac} is the first NIC that
	// has one, which on multi-port servers need not be the booting port).
	perMAC := s.base + "/ipxe/${netX/mac:hexhyp}"
	script := fmt.Sprintf(`#!ipxe
# CURE: fetch this NIC's per-node script; on failure retry DHCP and the fetch.
set cure_try:int32 0
:retry
chain --autofree %[1]s || goto failed
# The per-node script returned (it said exit): fall through to the next boot device.
exit
:failed
inc cure_try
iseq ${cure_try} %[2]d && goto give_up ||
echo CURE: fetching %[1]s failed (attempt ${cure_try}/%[2]d), retrying in 5 s
sleep 5
dhcp ||
goto retry
:give_up
echo CURE: no per-node script after %[2]d attempts, falling through to the next boot device
sleep 5
exit
`, perMAC, maxTries)
	writeScript(w, http.StatusOK, script)
}

func (s *Server) perMAC(w http.ResponseWriter, r *http.Request) {
	raw := r.PathValue("mac")
	mac, err := store.NormalizeMAC(raw)
	if err != nil {
		writeScript(w, http.StatusBadRequest, exitScript(fmt.Sprintf("bad MAC in URL: %v", err)))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), decisionTimeout)
	defer cancel()
	d, err := s.c.BootDecision(ctx, mac)
	if err != nil {
		status := http.StatusServiceUnavailable
		if errors.Is(err, ErrUnknownNode) || errors.Is(err, store.ErrNotFound) {
			status = http.StatusNotFound
		}
		s.log.Warn("boot decision failed", "mac", mac, "status", status, "err", err)
		writeScript(w, status, exitScript(fmt.Sprintf("no boot decision for %s: %v", mac, err)))
		return
	}
	if !d.Boot {
		s.log.Info("boot decision: local disk", "mac", mac, "reason", d.Reason)
		writeScript(w, http.StatusOK, exitScript(orDefault(d.Reason, "nothing to do")+"; booting from the next device"))
		return
	}
	if strings.ContainsAny(d.Cmdline, "\r\n") || strings.Contains(d.Cmdline, "${") {
		// iPXE would read a newline as a new command and ${...} as a setting.
		s.log.Error("boot decision: unsafe kernel command line", "mac", mac, "cmdline", d.Cmdline)
		writeScript(w, http.StatusInternalServerError, exitScript("coordinator produced an unsafe kernel command line"))
		return
	}
	initrd, err := s.initramfsName()
	if err != nil {
		s.log.Error("boot decision: image missing", "mac", mac, "err", err)
		writeScript(w, http.StatusServiceUnavailable, exitScript(err.Error()))
		return
	}
	args := strings.TrimSpace("initrd=" + initrd + " console=ttyS0 panic=-1 " + d.Cmdline)
	s.log.Info("boot decision: CURE", "mac", mac, "reason", d.Reason, "initrd", initrd)
	writeScript(w, http.StatusOK, fmt.Sprintf(`#!ipxe
echo CURE: %s
kernel %s %s
initrd %s
boot
`, ipxeText(orDefault(d.Reason, "booting CURE")), s.ImageURL(Kernel), args, s.ImageURL(initrd)))
}

// initramfsName prefers the gzip initramfs (every kernel can unpack it) and
// falls back to zstd; the kernel must exist.
func (s *Server) initramfsName() (string, error) {
	if _, err := os.Stat(filepath.Join(s.cfg.ImageDir, Kernel)); err != nil {
		return "", fmt.Errorf("CURE image not built: %s missing in %s", Kernel, s.cfg.ImageDir)
	}
	for _, n := range []string{InitramfsGzip, InitramfsZstd} {
		if _, err := os.Stat(filepath.Join(s.cfg.ImageDir, n)); err == nil {
			return n, nil
		}
	}
	return "", fmt.Errorf("CURE image not built: neither %s nor %s in %s", InitramfsGzip, InitramfsZstd, s.cfg.ImageDir)
}

// exitScript prints why and exits, so the firmware tries the next boot device.
func exitScript(why string) string {
	return "#!ipxe\necho CURE: " + ipxeText(why) + "\nsleep 2\nexit\n"
}

// ipxeText makes s safe as an echo argument: one line, no setting expansion.
func ipxeText(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	return strings.ReplaceAll(s, "${", "$ {")
}

func writeScript(w http.ResponseWriter, status int, script string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store") // decisions change per boot
	w.WriteHeader(status)
	fmt.Fprint(w, script)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// --- files ---

func (s *Server) image(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	switch name {
	case Kernel, InitramfsGzip, InitramfsZstd:
	default:
		http.Error(w, fmt.Sprintf("unknown image file %q: want %s, %s or %s", name, Kernel, InitramfsGzip, InitramfsZstd), http.StatusNotFound)
		return
	}
	serveFile(w, r, filepath.Join(s.cfg.ImageDir, name), "", "no-cache")
}

var hexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (s *Server) artifact(w http.ResponseWriter, r *http.Request) {
	h := strings.ToLower(r.PathValue("hex"))
	if !hexRE.MatchString(h) {
		http.Error(w, "artifact name must be a sha256: 64 hex digits", http.StatusBadRequest)
		return
	}
	// Content never changes under a hash name: the hash is the ETag and clients may cache forever.
	serveFile(w, r, ArtifactPath(s.cfg.ArtifactDir, h), `"`+h+`"`, "public, max-age=31536000, immutable")
}

// serveFile serves path with http.ServeContent (Range, If-Range, HEAD, conditional requests).
func serveFile(w http.ResponseWriter, r *http.Request, path, etag, cacheControl string) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		http.Error(w, "not found: "+filepath.Base(path), http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, "cannot open "+filepath.Base(path), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		http.Error(w, "not a file: "+filepath.Base(path), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", cacheControl)
	if etag != "" {
		w.Header().Set("ETag", etag)
	}
	http.ServeContent(w, r, "", st.ModTime(), f)
}

// --- host ready ---

// maxReadyBody bounds the phone-home form (cloud-init posts a few SSH keys and names).
const maxReadyBody = 1 << 20

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	token := ""
	if a := r.Header.Get("Authorization"); a != "" {
		scheme, t, ok := strings.Cut(a, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(t) == "" {
			unauthorized(w, "Authorization header: want `Bearer <token>`")
			return
		}
		token = strings.TrimSpace(t)
	} else {
		// cloud-init's phone_home cannot set headers: the token rides in the URL.
		token = r.URL.Query().Get("token")
	}
	if token == "" {
		unauthorized(w, "missing token: send Authorization: Bearer <token> or ?token=")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxReadyBody)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form body: "+err.Error(), http.StatusBadRequest)
		return
	}
	form := url.Values{}
	for k, v := range r.Form {
		if k != "token" { // never hand the secret on as data
			form[k] = v
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), decisionTimeout)
	defer cancel()
	if err := s.c.HostReady(ctx, id, token, form); err != nil {
		switch {
		case errors.Is(err, ErrUnauthorized), errors.Is(err, store.ErrExpired), errors.Is(err, store.ErrNotFound) && !errors.Is(err, ErrUnknownNode):
			s.log.Warn("host ready rejected", "node", id, "err", err)
			unauthorized(w, "token rejected")
		case errors.Is(err, ErrUnknownNode):
			http.Error(w, "unknown node "+id, http.StatusNotFound)
		default:
			s.log.Error("host ready failed", "node", id, "err", err)
			http.Error(w, "could not record readiness", http.StatusInternalServerError)
		}
		return
	}
	s.log.Info("host ready", "node", id, "hostname", form.Get("hostname"), "instance_id", form.Get("instance_id"))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="cure"`)
	http.Error(w, msg, http.StatusUnauthorized)
}

// --- logging ---

type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the real writer (flush, deadlines).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// logRequests logs one line per request. It logs the path without the query:
// the ready callback may carry its token there.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		level := slog.LevelInfo
		if rec.status >= 500 {
			level = slog.LevelError
		}
		s.log.Log(r.Context(), level, "http request",
			"method", r.Method, "path", r.URL.Path, "status", rec.status, "bytes", rec.bytes,
			"duration", time.Since(start), "remote", r.RemoteAddr)
	})
}
