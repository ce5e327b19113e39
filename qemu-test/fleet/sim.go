// Package fleet is CURE's fleet simulator: N simulated nodes, each a virtual
// BMC (qemu-test/vbmc) over a simulated machine whose PXE boot fetches the
// real per-MAC iPXE script, kernel and initrd over HTTP and whose CURE is
// the real runner transport and agent (gRPC/TLS, boot token, Hello with a
// synthetic inventory) running simulated phases at scaled durations, against
// the real provisioner-lite binary. Faults are injected at configured rates,
// deterministically from a seed.
package fleet

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/qemu-test/vbmc"
	"github.com/cure-oss/cure/tools/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Durations are real-world durations; the simulator divides them by Scale.
type Durations struct {
	Flash    time.Duration // one in-band firmware flash
	Write    time.Duration // writing the OS image beyond its download
	Validate time.Duration // a diagnostic's checks
	OSBoot   time.Duration // installed OS boot to its callback
}

// DefaultDurations are typical of an HGX node.
var DefaultDurations = Durations{Flash: 90 * time.Second, Write: 60 * time.Second, Validate: 5 * time.Minute, OSBoot: 90 * time.Second}

// Config describes a simulation.
type Config struct {
	Nodes     int
	Seed      uint64
	Scale     float64 // real seconds per simulated second (default 100)
	Durations Durations
	// DownloadBytesPerSec throttles each node's OS image download (default 32 MB/s).
	DownloadBytesPerSec int64
	ImageBytes          int64 // OS image size (default 2 MiB)
	// TransientRate is the share of nodes given each transient fault (stream
	// cut, self-reset mid-phase, BMC 503 burst, download cut); HardwareRate
	// the share with a hardware fault (NIC unflashable, NVMe media errors,
	// GPU missing), spread over the three kinds.
	TransientRate, HardwareRate float64
	// DiagnosticShare of the nodes run an RMA diagnostic instead of a
	// provision (the GPU-missing nodes always do: it is what finds them).
	DiagnosticShare float64
	// KillCoordinatorAt: when this share of runs has ended, the coordinator
	// is SIGKILLed and restarted on its state (0: never).
	KillCoordinatorAt float64
	// KillAfter, if set, kills instance 0 this long after the batch started
	// instead (mid-run, whatever the pace).
	KillAfter       time.Duration
	Work            string // state, logs (a temp dir of the caller's)
	Bin             string // provisioner-lite binary; built when empty
	Log             *slog.Logger
	CoordinatorArgs []string
	// Timeout bounds the whole batch (default 20 min).
	Timeout time.Duration
	// Instances > 1 runs several coordinators on the PostgreSQL database
	// DSN (required then); half the nodes are provisioned through each, and
	// KillCoordinatorAt kills instance 0 for good: the others take its runs over.
	Instances int
	DSN       string
	LeaseTTL  time.Duration // default 5s
	// AfterBatch, if set, runs once every run ended, while the coordinators
	// are still up (a test reads timelines there).
	AfterBatch func(ctx context.Context, c curev1.OperatorServiceClient) error
	// Shared: several instances behind one address (instances.go).
	Shared SharedConfig
}

func (c *Config) defaults() {
	if c.Scale == 0 {
		c.Scale = 100
	}
	if c.Durations == (Durations{}) {
		c.Durations = DefaultDurations
	}
	if c.DownloadBytesPerSec == 0 {
		c.DownloadBytesPerSec = 32 << 20
	}
	if c.ImageBytes == 0 {
		c.ImageBytes = 2 << 20
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Timeout == 0 {
		c.Timeout = 20 * time.Minute
	}
	if c.Instances == 0 {
		c.Instances = 1
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 5 * time.Second
	}
}

// Sim is a running simulation.
type Sim struct {
	cfg    Config
	ctx    context.Context
	cancel context.CancelFunc
	Nodes  []*Node
	byIP   map[string]*Node

	manDir, imageDir string
	caFile           string
	bmcLn            net.Listener
	bmcSrv           *http.Server
	bmcFP            string
	bmcPort          int

	clientMu sync.Mutex
	clients  map[string]*http.Client

	coordMu sync.Mutex
	coords  []*coordProc
	procs   []procStats // finished coordinator processes
	kills   int

	stats *stats

	imgPath     string
	ImageSHA256 string // the OS image's digest
}

// coordProc is one coordinator instance.
type coordProc struct {
	name, stateDir     string
	httpAddr, grpcAddr string
	httpBase           string
	metricsAddr        string // "": the default (one instance)
	tftpAddr           string // "": no front door
	cmd                *exec.Cmd
	log                *os.File
	dead               bool // killed for good (a takeover test)
	conn               *grpc.ClientConn
	client             curev1.OperatorServiceClient
}

// Client is the operator API of the first live instance.
func (s *Sim) Client() curev1.OperatorServiceClient {
	s.coordMu.Lock()
	defer s.coordMu.Unlock()
	for _, c := range s.coords {
		if !c.dead {
			return c.client
		}
	}
	return s.coords[0].client
}

// httpBases are the instances' boot servers, the node's own first: a site
// puts several behind its DHCP chain (or a VIP); a node whose server is
// down tries the next.
func (s *Sim) httpBases(n *Node) []string {
	s.coordMu.Lock()
	defer s.coordMu.Unlock()
	var out []string
	for i := range s.coords {
		c := s.coords[(n.index+i)%len(s.coords)]
		out = append(out, c.httpBase)
	}
	return out
}

func (s *Sim) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) / s.cfg.Scale)
}

// nodeIP gives node i its own loopback address, so the coordinator sees
// distinct peers (boot tokens are bound to the fetching address).
func nodeIP(i int) string {
	return fmt.Sprintf("127.%d.%d.%d", 20+i/(250*250), (i/250)%250+1, i%250+1)
}

// Start builds and starts everything: coordinator, BMCs, nodes.
func Start(ctx context.Context, cfg Config) (*Sim, error) {
	cfg.defaults()
	if cfg.Nodes <= 0 {
		return nil, errors.New("fleet: Nodes must be positive")
	}
	raiseNoFile()
	s := &Sim{cfg: cfg, byIP: map[string]*Node{}, clients: map[string]*http.Client{}, stats: newStats()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if cfg.Instances > 1 && cfg.DSN == "" {
		return nil, errors.New("fleet: several instances need a PostgreSQL DSN")
	}
	s.manDir = filepath.Join(cfg.Work, "manifests")
	s.imageDir = filepath.Join(cfg.Work, "image")
	for i := range cfg.Instances {
		c := &coordProc{name: fmt.Sprintf("fleet-%d", i+1), stateDir: filepath.Join(cfg.Work, fmt.Sprintf("state-%d", i+1))}
		hp, err := freePort()
		if err != nil {
			return nil, err
		}
		gp, err := freePort()
		if err != nil {
			return nil, err
		}
		c.httpAddr, c.grpcAddr = fmt.Sprintf("127.0.0.1:%d", hp), fmt.Sprintf("127.0.0.1:%d", gp)
		c.httpBase = "http://" + c.httpAddr
		s.coords = append(s.coords, c)
	}
	for _, d := range []string{filepath.Join(s.coords[0].stateDir, "pki"), filepath.Join(s.manDir, "suites"), s.imageDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := s.prepareShared(); err != nil {
		return nil, err
	}
	if cfg.Bin == "" {
		bin, err := BuildCoordinator(ctx, cfg.Work)
		if err != nil {
			return nil, err
		}
		s.cfg.Bin = bin
	}
	if err := s.prepare(); err != nil {
		return nil, err
	}
	if err := s.startBMCs(); err != nil {
		s.Close()
		return nil, err
	}
	for i := range s.coords {
		if err := s.startCoordinator(ctx, i); err != nil {
			s.Close()
			return nil, err
		}
		if i == 0 {
			if err := s.waitFrontDoor(ctx, 0); err != nil {
				s.Close()
				return nil, err
			}
		}
	}
	return s, nil
}

// BuildCoordinator builds provisioner-lite into dir and returns its path.
func BuildCoordinator(ctx context.Context, dir string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "provisioner-lite")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./provisioner-lite/cmd/provisioner-lite")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build provisioner-lite: %v\n%s", err, out)
	}
	return bin, nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/cure-oss/cure") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod of github.com/cure-oss/cure not found above the working directory")
		}
		dir = parent
	}
}

func raiseNoFile() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// Firmware versions of the simulated SKU.
const (
	bmcWant           = "1.50.0"
	biosOld, biosWant = "2.19.1", "2.21.2"
	// bmcCallTimeout is the coordinator's Redfish call timeout in the sim.
	bmcCallTimeout    = 5 * time.Second
	nicWant, nicOld   = "28.43.2026", "28.39.1002"
	nvmeWant, nvmeOld = "GDC7402Q", "GDC7302Q"
	skuName           = "sim-hgx"
	suiteName         = "qemu-diagnostic"
)

// prepare writes the PKI, the boot image, the artifacts, the manifests.
func (s *Sim) prepare() error {
	if err := s.writePKI(); err != nil {
		return err
	}
	if err := s.writeBootImage(); err != nil {
		return err
	}
	img := filepath.Join(s.cfg.Work, "os.raw")
	if err := writeRandom(img, s.cfg.ImageBytes); err != nil {
		return err
	}
	imgSum, err := fileSum(img)
	if err != nil {
		return err
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if err := s.writeSKU(root, imgSum); err != nil {
		return err
	}
	suite, err := os.ReadFile(filepath.Join(root, "manifests", "examples", "suites", suiteName+".yaml"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.manDir, "suites", suiteName+".yaml"), suite, 0o600); err != nil {
		return err
	}
	s.imgPath, s.ImageSHA256 = img, imgSum
	if s.cfg.Shared.ImageHolders == nil {
		s.cfg.CoordinatorArgs = append(s.cfg.CoordinatorArgs, "--import-artifact", img)
	}
	return s.pushManifests()
}

// writePKI makes the fleet's CA in instance 0's state dir and copies it,
// with one state key, to every instance.
func (s *Sim) writePKI() error {
	pkiDir := filepath.Join(s.coords[0].stateDir, "pki")
	if _, err := pki.EnsureCA(pkiDir); err != nil {
		return err
	}
	s.caFile = filepath.Join(pkiDir, pki.CACertFile)
	// Instances of one fleet share the CA and the state key (the database's
	// secrets are sealed with it); each has its own state dir.
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	for _, c := range s.coords {
		if err := os.MkdirAll(filepath.Join(c.stateDir, "pki"), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(c.stateDir, "state.key"), key, 0o600); err != nil {
			return err
		}
		if c.stateDir == s.coords[0].stateDir {
			continue
		}
		for _, f := range []string{pki.CACertFile, "ca-key.pem"} {
			b, err := os.ReadFile(filepath.Join(pkiDir, f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(c.stateDir, "pki", f), b, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeBootImage writes a small kernel and initrd, and the image report
// naming the fleet's CA.
func (s *Sim) writeBootImage() error {
	// A small kernel and initrd: the sim fetches them as iPXE does.
	for name, size := range map[string]int{"vmlinuz": 256 << 10, "initramfs.cpio.gz": 512 << 10} {
		if err := writeRandom(filepath.Join(s.imageDir, name), int64(size)); err != nil {
			return err
		}
	}
	// The image's report names the CA its runners trust, as cure-build's
	// does: the coordinators refuse an image of another CA.
	caPEM, err := os.ReadFile(s.caFile)
	if err != nil {
		return err
	}
	ca, err := pki.DescribeCA(s.caFile, caPEM)
	if err != nil {
		return err
	}
	rep, err := json.Marshal(map[string]any{"kind": "image", "ca": ca})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.imageDir, pki.ReportFile), rep, 0o600)
}

// writeSKU writes the simulated SKU's manifest: the example QEMU SKU with
// the sim's firmware, disks and OS image (of digest imgSum).
func (s *Sim) writeSKU(root, imgSum string) error {
	sku, err := manifests.LoadSKU(filepath.Join(root, "manifests", "examples", "qemu-nvme.yaml"))
	if err != nil {
		return err
	}
	sku.Metadata.Name = skuName
	sku.Metadata.Description = "Simulated HGX node of the fleet simulator"
	if sku.Spec.Firmware, err = s.simSKUFirmware(); err != nil {
		return err
	}
	sku.Spec.Wipe.Disks.Model = "SIM NVMe*"
	sku.Spec.OS.TargetDisk.Model = "SIM NVMe*"
	sku.Spec.OS.Image = manifests.Artifact{SHA256: imgSum, Size: s.cfg.ImageBytes, Format: "raw"}
	b, err := manifests.Marshal(sku)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.manDir, skuName+".yaml"), b, 0o600)
}

// simSKUFirmware writes the firmware artifacts (in-band files, out-of-band
// packages) and returns the SKU's firmware list naming them.
func (s *Sim) simSKUFirmware() ([]manifests.Firmware, error) {
	nicArt, err := s.inBandArtifact("nic.bin")
	if err != nil {
		return nil, err
	}
	nvmeArt, err := s.inBandArtifact("nvme.bin")
	if err != nil {
		return nil, err
	}
	bmcArt, err := s.oobPackage("BMC", bmcWant)
	if err != nil {
		return nil, err
	}
	biosArt, err := s.oobPackage("BIOS", biosWant)
	if err != nil {
		return nil, err
	}
	return []manifests.Firmware{
		{Name: "bmc", Component: "bmc", Via: "redfish", Match: manifests.Match{RedfishID: "BMC"}, Version: bmcWant, Gate: "equal", Artifact: bmcArt, Activation: "bmc-reset"},
		{Name: "bios", Component: "bios", Via: "redfish", Match: manifests.Match{RedfishID: "BIOS"}, Version: biosWant, Gate: "equal", Artifact: biosArt, Activation: "host-reboot"},
		{Name: "cx7", Component: "nic", Via: "in-band", Match: manifests.Match{VendorID: "0x15b3"}, Version: nicWant, Gate: "equal", Artifact: nicArt, Activation: "host-reboot"},
		{Name: "nvme-data", Component: "nvme", Via: "in-band", Match: manifests.Match{Model: "SIM NVMe*"}, Version: nvmeWant, Gate: "equal", Artifact: nvmeArt, Activation: "nvme-reset"},
	}, nil
}

// inBandArtifact writes a random in-band firmware file of the given name,
// has the coordinators import it, and returns its manifest artifact.
func (s *Sim) inBandArtifact(name string) (*manifests.Artifact, error) {
	p := filepath.Join(s.cfg.Work, name)
	if err := writeRandom(p, 64<<10); err != nil {
		return nil, err
	}
	sum, err := fileSum(p)
	if err != nil {
		return nil, err
	}
	s.cfg.CoordinatorArgs = append(s.cfg.CoordinatorArgs, "--import-artifact", p)
	return &manifests.Artifact{SHA256: sum, Size: 64 << 10, Format: "bin"}, nil
}

// simFirmware is the BMCs' out-of-band inventory: the mockup's, with a BIOS
// version a manifest can name.
func simFirmware() []vbmc.FirmwareSpec {
	fw := vbmc.DefaultFirmware()
	for i := range fw {
		if fw[i].ID == "BIOS" {
			fw[i].Version = biosOld
		}
	}
	return fw
}

// oobPackage writes a virtual-BMC firmware package (vbmc's header line and
// a payload) for component at version, to be imported as an artifact.
func (s *Sim) oobPackage(component, version string) (*manifests.Artifact, error) {
	payload := []byte(strings.Repeat("fleet-sim firmware "+component+" "+version+"\n", 2048))
	sum := sha256.Sum256(payload)
	h := vbmc.PackageHeader{Component: component, Version: version, Size: int64(len(payload)), SHA256: hex.EncodeToString(sum[:])}
	pkg := append(h.Line(), payload...)
	p := filepath.Join(s.cfg.Work, "oob-"+strings.ToLower(component)+".bin")
	if err := os.WriteFile(p, pkg, 0o600); err != nil {
		return nil, err
	}
	s.cfg.CoordinatorArgs = append(s.cfg.CoordinatorArgs, "--import-artifact", p)
	all := sha256.Sum256(pkg)
	return &manifests.Artifact{SHA256: hex.EncodeToString(all[:]), Size: int64(len(pkg)), Format: "bin"}, nil
}

func writeRandom(p string, n int64) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, rand.Reader, n); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func fileSum(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// startBMCs makes the nodes and serves every virtual BMC on one TLS
// listener, routed by the local address each connection came in on.
func (s *Sim) startBMCs() error {
	cert, fp, err := selfSigned()
	if err != nil {
		return err
	}
	s.bmcFP = fp
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		return err
	}
	s.bmcLn = ln
	port := ln.Addr().(*net.TCPAddr).Port
	n := s.cfg.Nodes
	faults := assignFaults(s.cfg)
	for i := range n {
		nd := &Node{index: i, ID: fmt.Sprintf("sim%05d", i), MAC: fmt.Sprintf("02:c0:%02x:%02x:%02x:%02x", i>>24&255, i>>16&255, i>>8&255, i&255),
			Serial: fmt.Sprintf("SIM-%06d", i), IP: nodeIP(i), sim: s, nicFW: nicOld, nvmeFW: nvmeOld,
			flashes: map[string]int{}, used: map[string]bool{}}
		nd.Faults = faults[i]
		nd.log = s.cfg.Log.With("node", nd.ID)
		nd.m = &machine{n: nd, events: make(chan vbmc.MachineEvent, 4)}
		b, err := vbmc.New(vbmc.Config{Name: nd.ID, Serial: nd.Serial, MAC: nd.MAC, Logger: nd.log, Firmware: simFirmware(),
			TaskDuration: s.scaled(20 * time.Second), ResetDuration: s.scaled(90 * time.Second)}, nd.m)
		if err != nil {
			return err
		}
		nd.BMC = b
		if nd.Faults.BMC503 {
			b.Fail503(3) // the first calls of the run hit a BMC shedding load
		}
		if nd.Faults.SlowBMCReset {
			b.SetSlowReturn(s.scaled(10 * time.Minute)) // a BMC that takes ten minutes to boot
		}
		if nd.Faults.UpdateTimeout {
			b.AcceptThenTimeoutUpdate(2 * bmcCallTimeout) // the answer to SimpleUpdate never comes in time
		}
		s.Nodes = append(s.Nodes, nd)
		s.byIP[nd.IP] = nd
	}
	s.bmcSrv = &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, localAddrKey{}, c.LocalAddr())
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			la, _ := r.Context().Value(localAddrKey{}).(net.Addr)
			host, _, _ := net.SplitHostPort(la.String())
			nd := s.byIP[host]
			if nd == nil {
				http.Error(w, "no BMC at "+host, http.StatusNotFound)
				return
			}
			nd.BMC.Handler().ServeHTTP(w, r)
		}),
		ErrorLog: nil,
	}
	go s.bmcSrv.ServeTLS(loopbackOnly{ln}, "", "")
	s.bmcPort = port
	return nil
}

// assignFaults decides, from the seed, which node suffers what: hardware
// faults on distinct nodes, transient ones anywhere (a node may have several).
func assignFaults(cfg Config) []Faults {
	rng := mrand.New(mrand.NewPCG(cfg.Seed, 0xc0de))
	n := cfg.Nodes
	hw := int(float64(n)*cfg.HardwareRate + 0.5)
	tr := int(float64(n)*cfg.TransientRate + 0.5)
	perm := rng.Perm(n)
	pick := func(k, off int) map[int]bool {
		m := map[int]bool{}
		for j := 0; j < k && j < n; j++ {
			m[perm[(off+j)%n]] = true
		}
		return m
	}
	// Hardware faults on distinct nodes; transient ones anywhere.
	nicBad, nvmeBad, gpuBad := pick(hw/3, 0), pick(hw/3, hw/3), pick(hw-2*(hw/3), 2*(hw/3))
	cut, killed, b503, dl := pick(tr, 7), pick(tr, 7+n/7), pick(tr, 7+2*n/7), pick(tr, 7+3*n/7)
	slow, lost := pick(tr, 7+4*n/7), pick(tr, 7+5*n/7)
	out := make([]Faults, n)
	for i := range out {
		out[i] = Faults{NICUnflashable: nicBad[i], NVMeMediaErrors: nvmeBad[i], GPUMissing: gpuBad[i],
			StreamCut: cut[i], RunnerKilled: killed[i], BMC503: b503[i], DownloadCut: dl[i], SlowBMCReset: slow[i], UpdateTimeout: lost[i]}
	}
	return out
}

type localAddrKey struct{}

// loopbackOnly drops connections that did not come over loopback: the BMC
// listener binds every address so each node's BMC can have its own.
type loopbackOnly struct{ net.Listener }

func (l loopbackOnly) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if a, ok := c.LocalAddr().(*net.TCPAddr); ok && a.IP.IsLoopback() {
			return c, nil
		}
		c.Close()
	}
}

// clientFor is the node's HTTP client: its requests leave from its address.
func (s *Sim) clientFor(n *Node) *http.Client {
	s.clientMu.Lock()
	defer s.clientMu.Unlock()
	if c, ok := s.clients[n.IP]; ok {
		return c
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(n.IP)}, Timeout: 10 * time.Second}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1, IdleConnTimeout: 5 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second}}
	s.clients[n.IP] = c
	return c
}

func (s *Sim) writeInventory() (string, error) {
	var b strings.Builder
	b.WriteString("nodes:\n")
	for i, n := range s.Nodes {
		fmt.Fprintf(&b, "  - id: %s\n    bmc: {url: \"https://%s:%d\", username: admin, password: password, fingerprint: %q}\n    macs: [%q]\n    sku: %s\n    serial: %s\n    labels: {rack: r%03d}\n",
			n.ID, n.IP, s.bmcPort, s.bmcFP, n.MAC, skuName, n.Serial, i/40)
	}
	p := filepath.Join(s.cfg.Work, "nodes.yaml")
	return p, os.WriteFile(p, []byte(b.String()), 0o600)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startCoordinator starts (or restarts) instance i on its state.
func (s *Sim) startCoordinator(ctx context.Context, i int) error {
	s.coordMu.Lock()
	defer s.coordMu.Unlock()
	c := s.coords[i]
	inv, err := s.writeInventory()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(s.cfg.Work, c.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	args := []string{
		"--state-dir", c.stateDir, "--manifests", s.manDir, "--nodes", inv, "--image-dir", s.imageDir,
		"--http-listen", c.httpAddr, "--grpc-listen", c.grpcAddr, "--advertise", "127.0.0.1",
		"--bmc-base-url", c.httpBase, "--wait-cure", "3m", "--wait-host", "3m", "--claim-settle", "1s",
		"--instance-id", c.name, "--stats-every", "2s", "--lease-ttl", s.cfg.LeaseTTL.String(), "--bmc-timeout", bmcCallTimeout.String(),
		// The coordinator's own clocks run at the simulation's pace where a
		// real site's would be small against a node's run (power-on pacing,
		// the reconnect budget, retry backoff); each keeps a floor this
		// machine's latencies need.
		"--power-on-rate", strconv.FormatFloat(2*s.cfg.Scale, 'f', -1, 64),
		"--reconnect", max(s.scaled(3*time.Minute), 5*time.Second).String(),
		"--retry-base", max(s.scaled(2*time.Second), 50*time.Millisecond).String(),
		"--retry-max", max(s.scaled(time.Minute), time.Second).String(),
		// Every simulated BMC and runner reaches the coordinator from
		// 127.0.0.1, where a site's nodes have an address each: the
		// per-source connection caps would take the fleet for one flooding
		// peer.
		"--http-max-conns-per-source", "4096", "--grpc-max-conns-per-source", "8192",
	}
	if s.cfg.DSN != "" {
		args = append(args, "--db", s.cfg.DSN)
	}
	if a := os.Getenv("FLEET_PPROF"); a != "" && i == 0 {
		args = append(args, "--pprof-listen", a) // profile the coordinator under the fleet's load
	}
	var peers []string
	for j, o := range s.coords {
		if j != i {
			peers = append(peers, o.grpcAddr)
		}
	}
	if len(peers) > 0 {
		args = append(args, "--peer-grpc", strings.Join(peers, ","))
	}
	args = append(args, s.cfg.CoordinatorArgs...)
	args = append(args, s.instanceArgs(i)...)
	cmd := exec.Command(s.cfg.Bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	c.cmd, c.log, c.dead = cmd, logf, false
	if err := waitTCP(ctx, c.grpcAddr, 2*time.Minute); err != nil {
		return fmt.Errorf("coordinator %s did not start (see %s): %w", c.name, logf.Name(), err)
	}
	if c.conn == nil {
		oc, err := pki.IssueOperatorCert(filepath.Join(s.coords[0].stateDir, "pki"), "fleet", pki.RoleAdmin)
		if err != nil {
			return err
		}
		cert, err := pki.LoadOperatorCert(oc.CertFile, oc.KeyFile)
		if err != nil {
			return err
		}
		caPEM, err := os.ReadFile(s.caFile)
		if err != nil {
			return err
		}
		tc, err := pki.ClientTLSConfig(caPEM, "127.0.0.1", &cert)
		if err != nil {
			return err
		}
		conn, err := grpc.NewClient(c.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			return err
		}
		c.conn, c.client = conn, curev1.NewOperatorServiceClient(conn)
	}
	return nil
}

// stopCoordinator ends instance i (SIGKILL when kill) and keeps its
// resource figures.
func (s *Sim) stopCoordinator(i int, kill bool) {
	s.coordMu.Lock()
	defer s.coordMu.Unlock()
	c := s.coords[i]
	if c.cmd == nil {
		return
	}
	ps := readProc(c.cmd.Process.Pid)
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
		s.kills++
	}
	_ = c.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
	if u := c.cmd.ProcessState; u != nil {
		// CPU from rusage after exit is exact. Its ru_maxrss is not: Linux
		// carries the forking process's peak (this simulator's) over exec,
		// so peak RSS is the coordinator's own VmHWM, read before the signal.
		if ru, ok := u.SysUsage().(*syscall.Rusage); ok {
			ps.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	s.procs = append(s.procs, ps)
	c.log.Close()
	c.cmd = nil
}

// Close stops the coordinator, the BMCs and the nodes.
func (s *Sim) Close() {
	for i, c := range s.coords {
		s.stopCoordinator(i, false)
		if c.conn != nil {
			c.conn.Close()
		}
	}
	s.cancel()
	if s.bmcSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = s.bmcSrv.Shutdown(ctx)
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, n := range s.Nodes {
		_ = n.BMC.Close(ctx)
	}
}

func waitTCP(ctx context.Context, addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// procStats are one coordinator process's resource figures.
type procStats struct {
	hwmKiB int64
	cpu    time.Duration
}

// readProc reads peak RSS (VmHWM) and CPU time of a live process.
func readProc(pid int) procStats {
	var ps procStats
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "VmHWM:") {
				f := strings.Fields(line)
				if len(f) >= 2 {
					ps.hwmKiB, _ = strconv.ParseInt(f[1], 10, 64)
				}
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			f := strings.Fields(s[i+2:])
			if len(f) > 13 {
				ut, _ := strconv.ParseInt(f[11], 10, 64)
				st, _ := strconv.ParseInt(f[12], 10, 64)
				ps.cpu = time.Duration(ut+st) * time.Second / 100 // USER_HZ
			}
		}
	}
	return ps
}

// Result is what a batch achieved.
type Result struct {
	Nodes, Started, Refused int
	Wall                    time.Duration
	// CleanWall is when the last node with no injected fault (transient or
	// hardware) in a provision ended, from the batch's start: the batch as
	// an undisturbed rack sees it. Wall also waits for the faulted nodes,
	// whose faults cost them time by design (a BMC away for ten minutes).
	CleanWall                 time.Duration
	Healthy, HealthyFirstPass int
	Faulted, FaultsNamed      int
	Problems                  []string // why a healthy node failed, or a fault went unnamed
	RSSMiB                    float64  // peak over coordinator processes
	CPUSeconds                float64  // all coordinator processes
	AckP50, AckP99            time.Duration
	TransP50, TransP99        time.Duration
	// Phases are the phase durations of the nodes without injected faults
	// in a provision, by phase, in pipeline order (where a batch loses time).
	Phases           []PhaseStat
	Commits          int64
	CommitsPerRun    float64
	DoubleFlashes    int // a component flashed more than once
	Reboots          int // machine boots across the fleet
	CoordinatorKills int
	RefusedReasons   map[string]int
}

// FirstPass is the share of healthy nodes that succeeded in their one run.
func (r *Result) FirstPass() float64 {
	if r.Healthy == 0 {
		return 0
	}
	return 100 * float64(r.HealthyFirstPass) / float64(r.Healthy)
}

// Named is the share of hardware-faulted nodes whose run named the part.
func (r *Result) Named() float64 {
	if r.Faulted == 0 {
		return 100
	}
	return 100 * float64(r.FaultsNamed) / float64(r.Faulted)
}

// Run provisions the fleet (the GPU-missing nodes and DiagnosticShare of
// the others run a diagnostic), waits for every run to end and judges them.
func (s *Sim) Run(ctx context.Context) (*Result, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	prov, diag, mode := s.chooseModes()
	b := &batchRun{
		res:      &Result{Nodes: len(s.Nodes), RefusedReasons: map[string]int{}},
		runs:     map[string]string{},
		mode:     mode,
		start:    time.Now(),
		phaseDur: map[string][]time.Duration{},
	}
	if err := s.provisionAll(ctx, b, prov, diag); err != nil {
		return nil, err
	}
	b.res.Started = len(b.runs)
	if err := s.awaitRuns(ctx, b); err != nil {
		return b.res, err
	}
	b.res.Wall = time.Since(b.start)
	for _, n := range s.Nodes {
		if err := s.judgeNode(ctx, b, n); err != nil {
			return b.res, err
		}
	}
	if err := s.summarize(ctx, b); err != nil {
		return b.res, err
	}
	return b.res, nil
}

// batchRun is what Run gathers over one batch.
type batchRun struct {
	res     *Result
	opCalls int64                  // this simulator's operator calls (see Commits)
	runs    map[string]string      // node -> run
	mode    map[string]curev1.Mode // node -> the mode it was asked for
	start   time.Time
	// Transition latencies over every run, and phase durations over the
	// undisturbed provisions (phaseOrder lists the phases as first seen).
	trans      []time.Duration
	phaseDur   map[string][]time.Duration
	phaseOrder []string
}

// chooseModes picks each node's mode, deterministically from the seed: the
// GPU-missing nodes and DiagnosticShare of the others run a diagnostic.
func (s *Sim) chooseModes() (prov, diag []string, mode map[string]curev1.Mode) {
	rng := mrand.New(mrand.NewPCG(s.cfg.Seed, 0xd1a9))
	mode = map[string]curev1.Mode{}
	for _, n := range s.Nodes {
		if n.Faults.GPUMissing || rng.Float64() < s.cfg.DiagnosticShare {
			diag = append(diag, n.ID)
			mode[n.ID] = curev1.Mode_MODE_DIAGNOSTIC
		} else {
			prov = append(prov, n.ID)
			mode[n.ID] = curev1.Mode_MODE_PROVISION
		}
	}
	return prov, diag, mode
}

// provisionBatch is one instance's share of one mode's nodes.
type provisionBatch struct {
	inst     int
	ids      []string
	mode     curev1.Mode
	manifest string
}

// instanceShare is the nodes of ids that instance inst is asked for (node
// index modulo the instance count).
func (s *Sim) instanceShare(ids []string, inst int) []string {
	var out []string
	for _, id := range ids {
		var i int
		fmt.Sscanf(id, "sim%d", &i)
		if i%len(s.coords) == inst {
			out = append(out, id)
		}
	}
	return out
}

// provisionAll starts the runs: with several instances, each is asked for
// its share, as operators spread a fleet. It records the runs started and
// the nodes refused in b.
func (s *Sim) provisionAll(ctx context.Context, b *batchRun, prov, diag []string) error {
	var batches []provisionBatch
	for inst := range s.coords {
		batches = append(batches, provisionBatch{inst, s.instanceShare(prov, inst), curev1.Mode_MODE_PROVISION, ""}, provisionBatch{inst, s.instanceShare(diag, inst), curev1.Mode_MODE_DIAGNOSTIC, suiteName})
	}
	// At most provisionChunk nodes a call, as an operator's script would
	// send them: one call for 10,000 nodes outlasts any sane deadline.
	const provisionChunk = 1000
	for _, pb := range batches {
		for len(pb.ids) > 0 {
			ids := pb.ids[:min(len(pb.ids), provisionChunk)]
			pb.ids = pb.ids[len(ids):]
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Minute)
			b.opCalls++
			resp, err := s.coords[pb.inst].client.Provision(pctx, &curev1.ProvisionRequest{NodeIds: ids, Mode: pb.mode, Manifest: pb.manifest})
			pcancel()
			if err != nil {
				return fmt.Errorf("provision %d nodes (%s) on %s: %w", len(ids), pb.mode, s.coords[pb.inst].name, err)
			}
			for _, r := range resp.GetRuns() {
				b.runs[r.GetNodeId()] = r.GetRunId()
			}
			for _, r := range resp.GetRefused() {
				b.res.Refused++
				b.res.RefusedReasons[r.GetReason()]++
			}
		}
	}
	return nil
}

// awaitRuns waits for every run to end; it kills the coordinator once on
// the way when asked.
func (s *Sim) awaitRuns(ctx context.Context, b *batchRun) error {
	killed := s.cfg.KillCoordinatorAt <= 0 && s.cfg.KillAfter <= 0
	started := b.res.Started
	poll := fleetPollInterval(started)
	for {
		if err := retry.Sleep(ctx, poll); err != nil {
			return fmt.Errorf("batch did not finish in %s: %w", s.cfg.Timeout, err)
		}
		fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
		b.opCalls++
		fs, err := s.Client().Fleet(fctx, &curev1.FleetRequest{})
		fcancel()
		if err != nil {
			continue // the coordinator may be restarting
		}
		ended := started - int(fs.GetActive())
		due := float64(ended) >= s.cfg.KillCoordinatorAt*float64(started)
		if s.cfg.KillAfter > 0 {
			due = time.Since(b.start) >= s.cfg.KillAfter
		}
		if !killed && due {
			killed = true
			if err := s.killCoordinatorFault(ctx, ended, started); err != nil {
				return err
			}
			continue
		}
		if fs.GetActive() == 0 {
			return nil
		}
	}
}

// killCoordinatorFault SIGKILLs instance 0: with other instances it stays
// dead (they take its runs over), alone it restarts on its state.
func (s *Sim) killCoordinatorFault(ctx context.Context, ended, started int) error {
	s.cfg.Log.Info("fault: killing the coordinator", "ended", ended, "of", started)
	if len(s.coords) > 1 {
		// For good: the other instances take its runs over.
		for _, i := range s.killList() {
			s.stopCoordinator(i, true)
			s.coordMu.Lock()
			s.coords[i].dead = true
			s.coordMu.Unlock()
		}
		return nil
	}
	s.stopCoordinator(0, true)
	if err := s.startCoordinator(ctx, 0); err != nil {
		return fmt.Errorf("restart coordinator: %w", err)
	}
	return nil
}

// judgeNode judges node n's run from its report into b.
func (s *Sim) judgeNode(ctx context.Context, b *batchRun, n *Node) error {
	res := b.res
	runID, ok := b.runs[n.ID]
	if !ok {
		if !n.Faults.Hardware() {
			res.Healthy++
			res.Problems = append(res.Problems, n.ID+": not started")
		} else {
			res.Faulted++
		}
		return nil
	}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	b.opCalls++
	rep, err := s.Client().Report(rctx, &curev1.ReportRequest{RunId: runID})
	rcancel()
	if err != nil {
		return fmt.Errorf("report of %s: %w", runID, err)
	}
	b.trans = append(b.trans, transitions(rep)...)
	if n.Faults == (Faults{}) && b.mode[n.ID] == curev1.Mode_MODE_PROVISION && rep.GetEndedUnixMs() > 0 {
		b.addCleanRun(rep)
	}
	if n.Faults.Hardware() {
		judgeFaulted(res, n, b.mode[n.ID], rep)
	} else {
		res.Healthy++
		if rep.GetRunStatus() == curev1.RunStatus_RUN_SUCCEEDED {
			res.HealthyFirstPass++
		} else {
			res.Problems = append(res.Problems, fmt.Sprintf("%s (%s, faults %+v): run %s: %s", n.ID, b.mode[n.ID], n.Faults, rep.GetStatus(), rep.GetMessage()))
		}
	}
	for comp, k := range n.AllFlashes() {
		if k > 1 {
			res.DoubleFlashes++
			res.Problems = append(res.Problems, fmt.Sprintf("%s: %s flashed %d times", n.ID, comp, k))
		}
	}
	all, _ := n.Boots()
	res.Reboots += all
	return nil
}

// addCleanRun counts an undisturbed provision's end and phase durations
// (queueing before the first phase counts as a phase of its own).
func (b *batchRun) addCleanRun(rep *curev1.RunReport) {
	b.res.CleanWall = max(b.res.CleanWall, time.UnixMilli(rep.GetEndedUnixMs()).Sub(b.start))
	if ph := rep.GetPhases(); len(ph) > 0 {
		first := slices.MinFunc(ph, func(x, y *curev1.PhaseRecord) int { return cmpInt64(x.GetStartedUnixMs(), y.GetStartedUnixMs()) })
		addPhase(b.phaseDur, &b.phaseOrder, "(queued)", time.UnixMilli(first.GetStartedUnixMs()).Sub(b.start))
	}
	for _, ph := range rep.GetPhases() {
		if ph.GetEndedUnixMs() > 0 {
			addPhase(b.phaseDur, &b.phaseOrder, ph.GetName(), time.Duration(ph.GetEndedUnixMs()-ph.GetStartedUnixMs())*time.Millisecond)
		}
	}
}

// judgeFaulted counts a hardware-faulted node's run: it passes when the run
// did not succeed and a verdict failed on the faulted component.
func judgeFaulted(res *Result, n *Node, mode curev1.Mode, rep *curev1.RunReport) {
	res.Faulted++
	want := n.Faults.FaultedComponent()
	named := false
	for _, v := range rep.GetVerdicts() {
		if v.GetComponent() == want && (v.GetStatus() == curev1.VerdictStatus_FAIL || v.GetStatus() == curev1.VerdictStatus_ERROR) {
			named = true
		}
	}
	if named && rep.GetRunStatus() != curev1.RunStatus_RUN_SUCCEEDED {
		res.FaultsNamed++
		return
	}
	var vs []string
	for _, v := range rep.GetVerdicts() {
		vs = append(vs, v.GetComponent()+"/"+v.GetCheck()+"="+v.GetStatus().String())
	}
	res.Problems = append(res.Problems, fmt.Sprintf("%s (%s, fault %s): run %s (%s), component named: %v; verdicts %s", n.ID, mode, want, rep.GetStatus(), rep.GetMessage(), named, strings.Join(vs, " ")))
}

// summarize fills the batch's percentiles, runs AfterBatch, stops the
// coordinators and adds their resource use and commits.
func (s *Sim) summarize(ctx context.Context, b *batchRun) error {
	res := b.res
	sort.Strings(res.Problems)
	res.AckP50, res.AckP99 = s.stats.ackPercentiles()
	res.TransP50, res.TransP99 = percentile(b.trans, 50), percentile(b.trans, 99)
	for _, name := range b.phaseOrder {
		ds := b.phaseDur[name]
		res.Phases = append(res.Phases, PhaseStat{Name: name, N: len(ds), P50: percentile(ds, 50), P99: percentile(ds, 99), Max: percentile(ds, 100)})
	}
	if s.cfg.AfterBatch != nil {
		if err := s.cfg.AfterBatch(ctx, s.Client()); err != nil {
			return err
		}
	}
	for i := range s.coords {
		s.stopCoordinator(i, false)
	}
	for _, p := range s.procs {
		res.RSSMiB = max(res.RSSMiB, float64(p.hwmKiB)/1024)
		res.CPUSeconds += p.cpu.Seconds()
	}
	res.CoordinatorKills = s.kills
	// Every operator call is audit-logged, one write each: the simulator's
	// own polling (Fleet twice a second, a Report per node) is not the
	// fleet's load, so one commit per call is taken out (a lower bound at
	// fleet load, where such a write shares its commit with others).
	res.Commits = max(s.commits()-b.opCalls, 0)
	if res.Started > 0 {
		res.CommitsPerRun = float64(res.Commits) / float64(res.Started)
	}
	return nil
}

// PhaseStat is one phase's durations over a batch's undisturbed nodes.
type PhaseStat struct {
	Name          string
	N             int
	P50, P99, Max time.Duration
}

func addPhase(m map[string][]time.Duration, order *[]string, name string, d time.Duration) {
	if _, ok := m[name]; !ok {
		*order = append(*order, name)
	}
	m[name] = append(m[name], d)
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// transitions are the coordinator's gaps between a phase's end and the next
// phase's start, in one run.
func transitions(rep *curev1.RunReport) []time.Duration {
	ph := slices.Clone(rep.GetPhases())
	sort.Slice(ph, func(i, j int) bool { return ph[i].GetStartedUnixMs() < ph[j].GetStartedUnixMs() })
	var out []time.Duration
	for i := 1; i < len(ph); i++ {
		if ph[i-1].GetEndedUnixMs() > 0 && ph[i].GetStartedUnixMs() >= ph[i-1].GetEndedUnixMs() {
			out = append(out, time.Duration(ph[i].GetStartedUnixMs()-ph[i-1].GetEndedUnixMs())*time.Millisecond)
		}
	}
	return out
}

var statsRE = regexp.MustCompile(`msg="store stats".* commits=(\d+)`)

// commits sums the store commits each coordinator process last reported
// (a killed process's count is its last periodic report).
func (s *Sim) commits() int64 {
	var total int64
	for _, c := range s.coords {
		total += logCommits(filepath.Join(s.cfg.Work, c.name+".log"))
	}
	return total
}

func logCommits(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var total, last int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `msg="provisioner-lite ready"`) {
			total += last // a new process: the previous one's count is final
			last = 0
		}
		if m := statsRE.FindStringSubmatch(line); m != nil {
			last, _ = strconv.ParseInt(m[1], 10, 64)
		}
	}
	return total + last
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

// fleetPollInterval is how often a batch asks the coordinator whether it
// ended: Fleet reads every run's state, so twice a second over 5,000 runs
// was the simulator's own load on the coordinator (about 5 % of its CPU),
// not the batch's. Half a millisecond per run, from 0.5 s to 5 s: the wall
// time is late by at most that, under 1 % of a batch of that size.
func fleetPollInterval(runs int) time.Duration {
	return min(max(500*time.Millisecond, time.Duration(runs)*500*time.Microsecond), 5*time.Second)
}
