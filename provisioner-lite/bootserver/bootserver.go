// Package bootserver is the HTTP server nodes boot from: the generic and per-MAC
// iPXE scripts, the CURE kernel and initramfs, content-addressed artifacts (with
// Range support, for resumable image streaming) and the installed OS's
// "ready" callback. Decisions (boot CURE or fall through to disk, token checks)
// belong to the boot gate (bootgate.Coordinator, with its Decision and errors);
// this package only speaks HTTP and iPXE.
package bootserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/artifactpeer"
	"github.com/cure-oss/cure/provisioner-lite/bootgate"
	"github.com/cure-oss/cure/provisioner-lite/peerlimit"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// Config configures a Server.
type Config struct {
	ImageDir string // vmlinuz, initramfs.cpio.lz4 (and .gz, .zst) from cure-build
	// ImageDirs are the images of other architectures than amd64 (ImageDir),
	// by GOARCH name: "arm64" is --image-dir-arm64 (arch.go).
	ImageDirs map[string]string
	// NodeArch, if set, says a known node's architecture (its SKU's
	// spec.arch) by MAC; "" for a MAC it does not know.
	NodeArch    func(ctx context.Context, mac string) (string, error)
	ArtifactDir string // content-addressed: <ArtifactDir>/sha256/<hex>
	BaseURL     string // as nodes reach us, e.g. http://10.0.2.2:8080
	Logger      *slog.Logger
	Limits      Limits
	// IPXEBuilds, when set, serves the iPXE builds at /ipxe-bin/<name> for
	// UEFI HTTP boot (netboot.Files.Handler, which sees the path without
	// the prefix).
	IPXEBuilds http.Handler
	// Served, if set, is told the bytes sent for every file request, by
	// kind: "kernel", "initrd" or "artifact" (metrics). It must not block.
	Served func(kind string, bytes int64)
	// Fill, if set, is asked for an artifact missing from ArtifactDir
	// (another instance's, or a mirror's: artifactpeer.Filler.Ensure); it
	// returns once the artifact is in the store, verified, or why not. A
	// peer instance's own fetch (artifactpeer.PeerHeader) is answered from
	// the store only.
	Fill func(ctx context.Context, sha256hex string) error
	// FillTimeout bounds a request's wait for Fill (default 30 min).
	FillTimeout time.Duration
}

// Limits are what a hostile client meets (docs/SECURITY.md); zero fields take
// the defaults.
type Limits struct {
	ReadHeader time.Duration // request line and headers (default 10s)
	Body       time.Duration // a request body, whole (default 30s); only the callback has one
	Idle       time.Duration // keep-alive between requests (default 30s)
	Write      time.Duration // a script or an error, whole (default 15s)
	// Stall bounds each 256 KiB of a file download: a reader that does not
	// take it in time is cut (default 60s).
	Stall          time.Duration
	MaxHeaderBytes int // default 16 KiB
	MaxRanges      int // Range parts per request (default 16), never overlapping
	MaxConns       int // open connections (default 4096)
	// MaxConnsPerSource caps the connections of one client address
	// (default 32): iPXE, the installed OS and a BMC fetch a few files at
	// a time, and one host must not hold the listener.
	MaxConnsPerSource int
	// Silent closes a connection that sent nothing within it (default 5s):
	// iPXE sends its request as soon as it connects.
	Silent time.Duration
}

func (l *Limits) defaults() {
	d := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	d(&l.ReadHeader, 10*time.Second)
	d(&l.Body, 30*time.Second)
	d(&l.Idle, 30*time.Second)
	d(&l.Write, 15*time.Second)
	d(&l.Stall, 60*time.Second)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 16 << 10
	}
	if l.MaxRanges <= 0 {
		l.MaxRanges = 16
	}
	if l.MaxConns <= 0 {
		l.MaxConns = 4096
	}
	if l.MaxConnsPerSource <= 0 {
		l.MaxConnsPerSource = 32
	}
	d(&l.Silent, 5*time.Second)
}

// Server serves the boot routes. Create it with New.
type Server struct {
	cfg  Config
	base string // BaseURL without trailing slash
	c    bootgate.Coordinator
	log  *slog.Logger
	h    http.Handler
	// refusals summarises the peers the listener refused or cut.
	refusals *peerlimit.Refusals
	// strangers logs iPXE script requests from MACs not in the inventory
	// at info, one line at once and then a summary per interval: a node
	// whose inventory MAC is wrong shows up in the log, a network full of
	// other machines does not flood it.
	strangers *peerlimit.Refusals
}

// Image file names served under /image/.
const (
	Kernel        = "vmlinuz"
	InitramfsLZ4  = "initramfs.cpio.lz4"
	InitramfsGzip = "initramfs.cpio.gz"
	InitramfsZstd = "initramfs.cpio.zst"
	// UKI is the signed unified kernel image UEFI HTTP boot loads.
	UKI = "cure.efi"
)

// IPXEBuildsPath is where Config.IPXEBuilds is served.
const IPXEBuildsPath = "/ipxe-bin"

// decisionTimeout bounds the coordinator's work per iPXE request: iPXE's own
// HTTP timeout is short, and a hung store must not hang a booting node.
const decisionTimeout = 15 * time.Second

// New validates cfg and builds the server.
func New(cfg Config, c bootgate.Coordinator) (*Server, error) {
	if c == nil {
		return nil, errors.New("bootserver: nil Coordinator")
	}
	if cfg.ImageDir == "" {
		return nil, errors.New("bootserver: Config.ImageDir is empty: want the directory holding vmlinuz and initramfs.cpio.{lz4,zst,gz}")
	}
	if cfg.ArtifactDir == "" {
		return nil, errors.New("bootserver: Config.ArtifactDir is empty: want the content-addressed artifact directory")
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("bootserver: Config.BaseURL %q: want http(s)://host[:port][/prefix] as nodes reach this server", cfg.BaseURL)
	}
	if !safeIPXEValue(strings.TrimRight(cfg.BaseURL, "/")) {
		return nil, fmt.Errorf("bootserver: Config.BaseURL %q: only letters, digits and . _ : / - may appear in an iPXE script", cfg.BaseURL)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	cfg.Limits.defaults()
	s := &Server{cfg: cfg, base: strings.TrimRight(cfg.BaseURL, "/"), c: c, log: log, refusals: peerlimit.NewRefusals(log, "http", slog.LevelWarn, 0),
		strangers: peerlimit.NewRefusals(log, "boot server", slog.LevelInfo, 0)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /boot.ipxe", s.generic)
	mux.HandleFunc("GET /ipxe/{mac}", s.perMAC)
	mux.HandleFunc("GET /image/{name}", s.image)
	mux.HandleFunc("GET /image/{arch}/{name}", s.archFile)
	mux.HandleFunc("GET /artifacts/sha256/{hex}", s.artifact)
	mux.HandleFunc("POST /v1/nodes/{id}/ready", s.ready)
	mux.HandleFunc("GET /v1/boot/{mac}", s.httpsBoot)
	if cfg.IPXEBuilds != nil {
		mux.Handle("GET "+IPXEBuildsPath+"/", http.StripPrefix(IPXEBuildsPath, cfg.IPXEBuilds))
	}
	s.h = s.logRequests(mux)
	return s, nil
}

// Handler returns the server's routes wrapped in request logging and
// per-request deadlines. GET routes also answer HEAD.
func (s *Server) Handler() http.Handler { return s.h }

// HTTPServer is the http.Server to serve Handler with: header, idle and
// header-size limits. Body and write deadlines are set per request.
func (s *Server) HTTPServer() *http.Server {
	l := s.cfg.Limits
	return &http.Server{
		Handler: s.h, ReadHeaderTimeout: l.ReadHeader, IdleTimeout: l.Idle, MaxHeaderBytes: l.MaxHeaderBytes,
		ErrorLog: peerlimit.HTTPErrorLog(s.refusals, s.log), // peers' noise summarised, the server's own errors rate-limited
	}
}

// Listener bounds the open connections of ln to Limits.MaxConns in all
// and MaxConnsPerSource per client, and closes silent ones: past a cap a
// connection is closed at once, and the refusals are logged as a summary
// (Flush it periodically).
func (s *Server) Listener(ln net.Listener) *peerlimit.Listener {
	l := s.cfg.Limits
	return peerlimit.NewListener(ln, peerlimit.ListenerConfig{MaxConns: l.MaxConns, MaxPerSource: l.MaxConnsPerSource, Silent: l.Silent,
		Refusals: s.refusals})
}

// ArtifactURL is where nodes fetch the artifact with that sha256.
func (s *Server) ArtifactURL(sha256hex string) string {
	return s.base + "/artifacts/sha256/" + strings.ToLower(sha256hex)
}

// ScriptURL is the generic iPXE script every node starts from.
func (s *Server) ScriptURL() string { return s.base + "/boot.ipxe" }

// ImageURL is where nodes fetch an image file (Kernel, InitramfsLZ4, InitramfsGzip, InitramfsZstd).
func (s *Server) ImageURL(name string) string { return s.base + "/image/" + name }

// --- iPXE scripts ---

// maxTries bounds the generic script's retries before it gives up and lets the
// firmware try the next boot device, so a node whose coordinator is down does not
// loop in PXE forever.
const maxTries = 5

func (s *Server) generic(w http.ResponseWriter, r *http.Request) {
	// ${netX/mac} is the NIC iPXE booted from (plain ${mac} is the first NIC that
	// has one, which on multi-port servers need not be the booting port).
	// ${buildarch} tells a machine the coordinator does not know yet
	// apart by architecture (arch.go).
	perMAC := s.base + "/ipxe/${netX/mac:hexhyp}?arch=${buildarch}"
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
	d, err := s.c.BootDecision(ctx, mac, remoteIP(r))
	if err != nil {
		status := http.StatusServiceUnavailable
		switch {
		case errors.Is(err, bootgate.ErrUnknownNode) || errors.Is(err, store.ErrNotFound):
			// Any machine on the network may PXE here: not an error of ours,
			// but a node with a wrong inventory MAC looks just like it.
			s.strangers.Note("iPXE script for a MAC not in the inventory", mac+"@"+remoteIP(r))
			writeScript(w, http.StatusNotFound, exitScript("MAC "+mac+" is not in the inventory"))
			return
		case errors.Is(err, bootgate.ErrRateLimited):
			// Counted with the refused requests (logRequests); the
			// coordinator records it as a rate-limited security event.
			writeScript(w, http.StatusTooManyRequests, exitScript(fmt.Sprintf("no boot decision for %s: %v", mac, err)))
			return
		case errors.Is(err, bootgate.ErrContested):
			// The coordinator recorded it as a security event; the
			// answer names no address.
			writeScript(w, http.StatusConflict, exitScript("boot identity of "+mac+" contested by two claimants: the run waits for an operator"))
			return
		}
		s.log.Warn("boot decision failed", "mac", mac, "status", status, "err", err)
		writeScript(w, status, exitScript(fmt.Sprintf("no boot decision for %s: %v", mac, err)))
		return
	}
	if !d.Boot {
		s.log.Info("boot decision: local disk", "mac", mac, "reason", d.Reason)
		writeScript(w, http.StatusOK, exitScript(orDefault(d.Reason, "nothing to do")+", booting from the next device"))
		return
	}
	for _, arg := range strings.Split(d.Cmdline, " ") {
		if arg != "" && !safeIPXEValue(arg) {
			// iPXE has no quoting: a token "||", "&&", ";" or "#..." is an
			// operator, ${...} a setting, a newline a new command.
			s.log.Error("boot decision: unsafe kernel command line argument", "mac", mac, "arg", ipxeText(arg))
			writeScript(w, http.StatusInternalServerError, exitScript("coordinator produced an unsafe kernel command line"))
			return
		}
	}
	arch, err := s.bootArch(ctx, r, mac)
	var dir, prefix, console, initrd string
	if err == nil {
		dir, prefix, console, err = s.archImage(arch)
	}
	if err == nil {
		initrd, err = initramfsIn(dir)
	}
	if err != nil {
		s.log.Error("boot decision: no image for the node", "mac", mac, "arch", arch, "err", err)
		writeScript(w, http.StatusServiceUnavailable, exitScript(err.Error()))
		return
	}
	args := strings.TrimSpace("initrd=" + initrd + " " + console + " panic=-1 " + d.Cmdline)
	s.log.Info("boot decision: CURE", "mac", mac, "reason", d.Reason, "initrd", initrd, "arch", arch)
	writeScript(w, http.StatusOK, fmt.Sprintf(`#!ipxe
echo CURE: %s
kernel %s %s
initrd %s
boot
`, ipxeText(orDefault(d.Reason, "booting CURE")), prefix+Kernel, args, prefix+initrd))
}

// httpsBoot answers the signed image's request for its boot parameters
// (a command line fragment with the per-boot token). Only over TLS: the
// token must not cross the network in clear on the verified path.
func (s *Server) httpsBoot(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	hb, ok := s.c.(bootgate.HTTPSBooter)
	if r.TLS == nil || !ok {
		http.Error(w, "boot parameters are served over HTTPS only", http.StatusForbidden)
		return
	}
	mac, err := store.NormalizeMAC(r.PathValue("mac"))
	if err != nil {
		http.Error(w, "bad MAC in URL: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), decisionTimeout)
	defer cancel()
	d, err := hb.HTTPSBootDecision(ctx, mac, remoteIP(r))
	switch {
	case errors.Is(err, bootgate.ErrUnknownNode) || errors.Is(err, store.ErrNotFound):
		s.strangers.Note("boot parameters for a MAC not in the inventory", mac+"@"+remoteIP(r))
		http.Error(w, "MAC "+mac+" is not in the inventory", http.StatusNotFound)
		return
	case errors.Is(err, bootgate.ErrRateLimited):
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	case errors.Is(err, bootgate.ErrContested):
		http.Error(w, "boot identity of "+mac+" contested by two claimants: the run waits for an operator", http.StatusConflict)
		return
	case err != nil:
		s.log.Warn("https boot decision failed", "mac", mac, "err", err)
		http.Error(w, "no boot decision", http.StatusServiceUnavailable)
		return
	case !d.Boot:
		s.log.Info("https boot decision: none", "mac", mac, "reason", d.Reason)
		http.Error(w, orDefault(d.Reason, "nothing to do"), http.StatusConflict)
		return
	}
	s.log.Info("https boot decision: CURE", "mac", mac, "reason", d.Reason)
	_, _ = io.WriteString(w, d.Cmdline+"\n")
}

// initramfsName prefers the LZ4 initramfs (the kernel unpacks it fastest:
// builder's ipxeTemplate has the figures), then gzip, then zstd; the
// kernel must exist.
func (s *Server) initramfsName() (string, error) {
	if _, err := os.Stat(filepath.Join(s.cfg.ImageDir, Kernel)); err != nil {
		return "", fmt.Errorf("CURE image not built: %s missing in %s", Kernel, s.cfg.ImageDir)
	}
	for _, n := range []string{InitramfsLZ4, InitramfsGzip, InitramfsZstd} {
		if _, err := os.Stat(filepath.Join(s.cfg.ImageDir, n)); err == nil {
			return n, nil
		}
	}
	return "", fmt.Errorf("CURE image not built: none of %s, %s, %s in %s", InitramfsLZ4, InitramfsGzip, InitramfsZstd, s.cfg.ImageDir)
}

// exitScript prints why and exits, so the firmware tries the next boot device.
func exitScript(why string) string {
	return "#!ipxe\necho CURE: " + ipxeText(why) + "\nsleep 2\nexit\n"
}

// ipxeText makes s safe as the arguments of an iPXE echo: iPXE has no
// quoting, so every character outside a plain alphabet becomes '_' (no
// '$', '{', '#', '|', '&', ';' or control character survives) and the
// result is one line of at most 200 bytes.
func ipxeText(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == ' ' || safeIPXERune(r) || strings.ContainsRune(",()+@", r) {
			return r
		}
		return '_'
	}, s)
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// safeIPXEValue reports whether s can stand as one iPXE token unquoted: only
// letters, digits and . _ : / = , + @ - , so no operator, comment, setting
// expansion or word break.
func safeIPXEValue(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !safeIPXERune(r) && !strings.ContainsRune(",+@", r) {
			return false
		}
	}
	return true
}

func safeIPXERune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:/=-", r)
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
	s.serveImage(w, r, s.cfg.ImageDir, r.PathValue("name"))
}

// serveImage serves one of the image files in dir.
func (s *Server) serveImage(w http.ResponseWriter, r *http.Request, dir, name string) {
	switch name {
	case Kernel, InitramfsLZ4, InitramfsGzip, InitramfsZstd:
	case UKI:
		// EDK2's HTTP boot takes the image type from Content-Type.
		w.Header().Set("Content-Type", "application/efi")
	default:
		http.Error(w, fmt.Sprintf("unknown image file %q: want %s, %s, %s, %s or %s", name, Kernel, InitramfsLZ4, InitramfsGzip, InitramfsZstd, UKI), http.StatusNotFound)
		return
	}
	s.serveFile(w, r, filepath.Join(dir, name), "", "no-cache")
}

var hexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (s *Server) artifact(w http.ResponseWriter, r *http.Request) {
	h := strings.ToLower(r.PathValue("hex"))
	if !hexRE.MatchString(h) {
		http.Error(w, "artifact name must be a sha256: 64 hex digits", http.StatusBadRequest)
		return
	}
	if !s.fill(w, r, h) {
		return
	}
	// Content never changes under a hash name: the hash is the ETag and clients may cache forever.
	s.serveFile(w, r, ArtifactPath(s.cfg.ArtifactDir, h), `"`+h+`"`, "public, max-age=31536000, immutable")
}

// fill fetches a missing artifact through Config.Fill; false: the
// request was answered (no source has it, or the fetch failed).
func (s *Server) fill(w http.ResponseWriter, r *http.Request, h string) bool {
	if s.cfg.Fill == nil || r.Header.Get(artifactpeer.PeerHeader) != "" {
		return true
	}
	if _, err := os.Stat(ArtifactPath(s.cfg.ArtifactDir, h)); err == nil {
		return true
	}
	wait := s.cfg.FillTimeout
	if wait <= 0 {
		wait = 30 * time.Minute
	}
	// The fetch may outlast the write deadline of an answer: it is bounded
	// by wait instead, and the download's stall limit applies after.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + s.cfg.Limits.Write))
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	err := s.cfg.Fill(ctx, h)
	switch {
	case err == nil:
		return true
	case errors.Is(err, artifactpeer.ErrNotFound):
		http.Error(w, "not found: "+h+" (not at any peer instance or mirror)", http.StatusNotFound)
	default:
		s.log.Error("artifact fetch from peers failed", "sha256", h, "err", err)
		http.Error(w, "artifact "+h+" could not be fetched from a peer instance or mirror", http.StatusBadGateway)
	}
	return false
}

// serveFile serves path with http.ServeContent (Range, If-Range, HEAD,
// conditional requests): at most MaxRanges non-overlapping ranges, and a
// reader that stalls is cut.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request, path, etag, cacheControl string) {
	if err := checkRanges(r.Header.Get("Range"), s.cfg.Limits.MaxRanges); err != nil {
		w.Header().Set("Content-Range", "bytes */*")
		http.Error(w, err.Error(), http.StatusRequestedRangeNotSatisfiable)
		return
	}
	w = &stallWriter{ResponseWriter: w, rc: http.NewResponseController(w), stall: s.cfg.Limits.Stall}
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
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/octet-stream")
	}
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
	// The body is read only once the coordinator has accepted the token.
	var form url.Values
	var formErr error
	readForm := func() (url.Values, error) {
		r.Body = http.MaxBytesReader(w, r.Body, maxReadyBody)
		if err := r.ParseForm(); err != nil {
			formErr = err
			return nil, err
		}
		form = url.Values{}
		for k, v := range r.Form {
			if k != "token" { // never hand the secret on as data
				form[k] = v
			}
		}
		return form, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), decisionTimeout)
	defer cancel()
	if err := s.c.HostReady(ctx, id, token, remoteIP(r), readForm); err != nil {
		switch {
		case formErr != nil:
			http.Error(w, "bad form body: "+formErr.Error(), http.StatusBadRequest)
		case errors.Is(err, bootgate.ErrUnauthorized), errors.Is(err, store.ErrExpired), errors.Is(err, store.ErrNotFound) && !errors.Is(err, bootgate.ErrUnknownNode):
			unauthorized(w, "token rejected") // counted with the refused requests (logRequests)
		case errors.Is(err, bootgate.ErrUnknownNode):
			http.Error(w, "unknown node", http.StatusNotFound)
		default:
			s.log.Error("host ready failed", "node", id, "err", err)
			http.Error(w, "could not record readiness", http.StatusInternalServerError)
		}
		return
	}
	s.log.Info("host ready", "node", id, "hostname", textsafe.BoundedLine(form.Get("hostname"), 128), "instance_id", textsafe.BoundedLine(form.Get("instance_id"), 128))
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

// logRequests logs one line per request and sets its deadlines. It logs the
// path without the query: the ready callback may carry its token there.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rc := http.NewResponseController(w)
		// A body must arrive in time; without one there is nothing to read
		// (a read deadline would cut a long download's background read).
		if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
			_ = rc.SetReadDeadline(start.Add(s.cfg.Limits.Body))
		} else {
			_ = rc.SetReadDeadline(time.Time{})
		}
		_ = rc.SetWriteDeadline(start.Add(s.cfg.Limits.Write)) // file routes extend it as they make progress
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		if s.cfg.Served != nil {
			if kind := fileKind(r.URL.Path); kind != "" {
				s.cfg.Served(kind, rec.bytes)
			}
		}
		if rec.status >= 400 && rec.status < 500 {
			// A refused request (unknown MAC or path, rate limit, bad
			// token) is counted into the listener's summary: a peer
			// looping on one costs a counter, not a line each.
			s.refusals.Note("http-"+strconv.Itoa(rec.status), remoteIP(r))
			return
		}
		level := slog.LevelInfo
		if rec.status >= 500 {
			level = slog.LevelError
		}
		s.log.Log(r.Context(), level, "http request",
			"method", r.Method, "path", textsafe.BoundedLine(r.URL.Path, 256), "status", rec.status, "bytes", rec.bytes,
			"duration", time.Since(start), "remote", r.RemoteAddr)
	})
}

// fileKind names what a file route serves, "" for other routes.
func fileKind(path string) string {
	switch {
	case path == "/image/"+Kernel, path == "/image/"+UKI:
		return "kernel"
	case strings.HasPrefix(path, "/image/"):
		return "initrd"
	case strings.HasPrefix(path, "/artifacts/"):
		return "artifact"
	}
	return ""
}

// remoteIP is the client's address without the port. Forwarding headers are
// not trusted: anyone can write them.
func remoteIP(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// stallChunk is how much of a file must go out within Limits.Stall.
const stallChunk = 256 << 10

// stallWriter re-arms the connection's write deadline for every 256 KiB, so
// a download runs as long as it makes progress and a client that stops
// reading is cut after Limits.Stall.
type stallWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
}

func (w *stallWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), stallChunk)
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.stall))
		m, err := w.ResponseWriter.Write(p[:n])
		written += m
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

// Unwrap lets http.ResponseController reach the connection.
func (w *stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// checkRanges refuses a Range header with more than max parts, or with parts
// that overlap: a few hundred bytes of overlapping ranges would otherwise ask
// for megabytes. Syntax errors are left to http.ServeContent.
func checkRanges(h string, max int) error {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if h == "" || !ok {
		return nil
	}
	parts := strings.Split(spec, ",")
	if len(parts) > max {
		return fmt.Errorf("range: %d parts, at most %d", len(parts), max)
	}
	if len(parts) == 1 {
		return nil
	}
	type span struct{ from, to int64 } // to = -1: open-ended
	var spans []span
	for _, p := range parts {
		a, b, ok := strings.Cut(strings.TrimSpace(p), "-")
		if !ok || a == "" {
			return fmt.Errorf("range: suffix ranges (%q) cannot be combined with others", p)
		}
		from, err := strconv.ParseInt(a, 10, 64)
		if err != nil || from < 0 {
			return nil
		}
		to := int64(-1)
		if b != "" {
			if to, err = strconv.ParseInt(b, 10, 64); err != nil || to < from {
				return nil
			}
		}
		spans = append(spans, span{from, to})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].from < spans[j].from })
	for i := 1; i < len(spans); i++ {
		prev := spans[i-1]
		if prev.to < 0 || spans[i].from <= prev.to {
			return fmt.Errorf("range: parts overlap")
		}
	}
	return nil
}
