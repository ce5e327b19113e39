// Package harness assembles the whole CURE loop on one machine: virtual BMCs
// driving QEMU nodes, a real provisioner-lite process, and the images `make`
// built. The end-to-end tests and `make demo` both use it.
package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/qemu-test/vbmc"
	"github.com/cure-oss/cure/tools/uefi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Options configure an environment.
type Options struct {
	Out           string // make's output dir: image/, hostos/, pki/
	Work          string // state, disks, logs; kept between runs for the demo
	Nodes         int
	PhaseAttempts int
	DiskBytes     int64
	MemoryMiB     int
	// CoordinatorLog receives provisioner-lite's stderr (nil: work/coordinator.log only).
	CoordinatorLog io.Writer
	// EditManifest may change the test SKU before it is written.
	EditManifest func(*manifests.SKU)
	Logger       *slog.Logger
	// ExtraCoordinatorArgs are appended to provisioner-lite's command line.
	ExtraCoordinatorArgs []string
	// ExtraSuites are validation suite files served beside the examples'
	// (a test's own, scaled to QEMU).
	ExtraSuites []string
	// Firmware is each virtual BMC's simulated FirmwareInventory (nil:
	// vbmc.DefaultFirmware()).
	Firmware []vbmc.FirmwareSpec
	// DiskThrottle slows the disks of the nodes it names (node1, node2...)
	// with QEMU's block throttling: a part slower than its fleet.
	DiskThrottle map[string]vbmc.DiskThrottle
	// ProxyRunnerStreams routes the nodes' gRPC connections through a TCP
	// proxy the test can cut (Env.CutRunnerStreams); operator calls go direct.
	ProxyRunnerStreams bool
	// Site puts the nodes on a real network instead of QEMU's user network
	// (SLIRP, whose built-in DHCP hands out the boot URL): each node's NIC
	// on a tap device, the coordinator listening on all addresses and
	// advertising the bridge address. Whatever answers DHCP there (a site
	// DHCP server, the coordinator's proxy DHCP) decides the boot.
	Site *SiteNet
	// DiskPort puts every node's NVMe controller behind a PCIe root port
	// with this link capability (vbmc.QEMUConfig.DiskPort).
	DiskPort *vbmc.RootPort
	// UEFI gives every node OVMF firmware and a BMC that offers
	// BootSourceOverrideMode UEFI (besides Legacy): the coordinator's
	// driver then boots the nodes in UEFI.
	UEFI bool
	// SecureHTTPS is verified network boot: every node runs OVMF's Secure
	// Boot build (enforcing, Debian's snakeoil PK/KEK, the site's Secure
	// Boot certificate from Out/pki enrolled in db), has a swtpm TPM and
	// trusts the coordinator's boot CA for HTTPS boot; its BMC offers
	// UefiHttp, and the coordinator serves the signed image on an HTTPS
	// listener and boots nodes with --netboot uefi-http.
	SecureHTTPS bool
	// SecureBootOff keeps SecureHTTPS's firmware, TPM and HTTPS boot but
	// with Secure Boot not enforced (a variable store with no keys): any
	// image boots, and only the TPM's measurements tell it apart.
	SecureBootOff bool
	// ImageDir is the image the coordinator serves (its report.json is what
	// boots are attested against); empty: Out/image.
	ImageDir string
	// Bin holds provisioner-lite and curectl already built (BuildBinaries),
	// shared by the environments of one test process; empty: Start builds
	// them into Work/bin.
	Bin string
	// ExtraNVMe gives every node this many more NVMe drives (each its own
	// controller, serial <node serial>-<k>, k from 2), empty files of
	// DiskBytes: the members of a software RAID.
	ExtraNVMe int
	// ToolBundle requires make toolbundle's bundle
	// (Out/toolbundle/toolbundle.tar.zst), for suites that run its
	// programs. Without it the coordinator still serves the bundle when it
	// is built, as a site's does (the image pins it for cure-tools).
	ToolBundle bool
	// Arm64 makes the nodes arm64 ones (arm64.go); nil: x86-64.
	Arm64 *Arm64Nodes
}

// ToolBundlePath is where make toolbundle leaves the bundle under Out.
func ToolBundlePath(out string) string { return filepath.Join(out, "toolbundle", "toolbundle.tar.zst") }

// SiteNet is the network the nodes boot on when not SLIRP.
type SiteNet struct {
	// Taps are the nodes' tap devices, one per node, already on the bridge.
	Taps []string
	// Advertise is the coordinator's address on the bridge.
	Advertise string
}

// OVMF firmware (Debian's ovmf package) for UEFI nodes.
const (
	OVMFCode = "/usr/share/OVMF/OVMF_CODE.fd"
	OVMFVars = "/usr/share/OVMF/OVMF_VARS.fd"
	// OVMFSecureCode and OVMFSecureVars are the Secure Boot build and a
	// store with Secure Boot enabled (test keys in PK, KEK and db).
	OVMFSecureCode = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
	OVMFSecureVars = "/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd"
)

// Node is one QEMU node and its BMC.
type Node struct {
	ID, MAC, Serial, UUID string
	Disk, Console         string
	BMC                   *vbmc.BMC
	BMCURL                string // https://127.0.0.1:port
	// BMCFingerprint pins the virtual BMC's self-signed certificate
	// ("sha256:<hex>"); the inventory carries it, so the coordinator
	// verifies BMC TLS as it does in production.
	BMCFingerprint string
	// ExtraDisks are the files behind Options.ExtraNVMe's drives.
	ExtraDisks []string
	// Machine is the QEMU process behind the BMC: stopping it directly,
	// without the BMC knowing, is a crash of the host.
	Machine *vbmc.QEMUMachine
}

// Image describes the host-OS artifact installed on nodes.
type Image struct {
	Path, RawPath string
	SHA256        string
	Size          int64
}

// Env is a running environment.
type Env struct {
	Opts     Options
	Root     string
	Bin      string
	StateDir string
	HTTPAddr string
	GRPCAddr string
	Nodes    []*Node
	HostOS   Image
	Client   curev1.OperatorServiceClient
	// OperatorCert and OperatorKey are the client certificate Client uses
	// (curectl --cert/--key against this coordinator).
	OperatorCert, OperatorKey string

	conn     *grpc.ClientConn
	proxy    *streamProxy
	coord    *exec.Cmd
	coordOut *os.File
	// coordExited delivers the coordinator's exit (its one Wait).
	coordExited chan error
	// The coordinator's listening sockets, bound here for the Env's life
	// and handed to every coordinator process it starts (fd:3, fd:4): no
	// other process can take the ports between a pick and a bind, and a
	// restarted coordinator finds them again.
	httpLn, grpcLn *net.TCPListener
	// httpsLn is the HTTPS boot listener (SecureHTTPS), fd:5.
	httpsLn *net.TCPListener
	// ekCA certifies the nodes' TPM EKs (SecureHTTPS); its root is the
	// coordinator's --ek-roots.
	ekCA    *ekCA
	servers []*vbmc.Server
	mu      sync.Mutex
	// extraEdit is the latest EditManifest edit.
	extraEdit func(*manifests.SKU)
}

// RepoRoot finds the module root from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/cure-oss/cure")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod of github.com/cure-oss/cure not found above the working directory")
		}
		dir = parent
	}
}

// Missing lists the build outputs an environment needs that are absent.
func Missing(out string) []string {
	var miss []string
	for _, f := range []string{"image/vmlinuz", "image/initramfs.cpio.lz4", "pki/ca.pem", "pki/ca-key.pem", "hostos/disk.raw.zst", "hostos/disk.raw"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			miss = append(miss, filepath.Join(out, f))
		}
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		miss = append(miss, "qemu-system-x86_64")
	}
	return miss
}

// Start builds the binaries (or takes Options.Bin's), writes the inventory
// and manifest, starts the virtual BMCs and the coordinator.
func Start(ctx context.Context, o Options) (*Env, error) {
	o.defaults()
	if miss := Missing(o.Out); len(miss) > 0 {
		return nil, fmt.Errorf("build outputs missing (run `make image hostos`): %s", strings.Join(miss, ", "))
	}
	if _, err := os.Stat(ToolBundlePath(o.Out)); o.ToolBundle && err != nil {
		return nil, fmt.Errorf("the tool bundle is not built (run `make toolbundle`): %w", err)
	}
	if o.Site != nil && len(o.Site.Taps) < o.Nodes {
		return nil, fmt.Errorf("site network: %d tap devices for %d nodes", len(o.Site.Taps), o.Nodes)
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	e := &Env{Opts: o, Root: root, Bin: o.Bin, StateDir: filepath.Join(o.Work, "state")}
	if e.Bin == "" {
		e.Bin = filepath.Join(o.Work, "bin")
		if err := BuildBinaries(ctx, root, e.Bin); err != nil {
			return nil, err
		}
	}
	if err := e.prepareState(); err != nil {
		return nil, err
	}
	if err := e.hostOS(); err != nil {
		return nil, err
	}
	if err := e.writeManifest(); err != nil {
		return nil, err
	}
	if err := e.listen(); err != nil {
		return nil, err
	}
	if err := e.startBMCs(ctx, e.httpLn.Addr().(*net.TCPAddr).Port); err != nil {
		e.Close()
		return nil, err
	}
	if err := e.writeInventory(); err != nil {
		e.Close()
		return nil, err
	}
	if err := e.StartCoordinator(ctx); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// defaults fills the options a caller left zero.
func (o *Options) defaults() {
	if o.Nodes == 0 {
		o.Nodes = 1
	}
	if o.DiskBytes == 0 {
		o.DiskBytes = 1 << 30
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 1024
	}
	if o.PhaseAttempts == 0 {
		o.PhaseAttempts = 3
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// prepareState makes the work directories and the coordinator's PKI: the
// CA make generated (the image trusts it; the coordinator serves a
// certificate it issues), the Secure Boot key and boot CA for verified
// boot, and an operator certificate for Client.
func (e *Env) prepareState() error {
	o := e.Opts
	for _, d := range []string{filepath.Join(e.StateDir, "pki"), filepath.Join(o.Work, "manifests"), filepath.Join(o.Work, "nodes")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, f := range []string{"ca.pem", "ca-key.pem"} {
		if err := copyFile(filepath.Join(o.Out, "pki", f), filepath.Join(e.StateDir, "pki", f)); err != nil {
			return err
		}
	}
	if o.SecureHTTPS {
		// The Secure Boot key signed out/image/cure.efi; the boot CA is
		// what the nodes' firmware trusts for HTTPS boot.
		for _, f := range []string{pki.SecureBootCertFile, pki.SecureBootKeyFile, pki.BootCACertFile, pki.BootCAKeyFile} {
			if err := copyFile(filepath.Join(o.Out, "pki", f), filepath.Join(e.StateDir, "pki", f)); err != nil {
				return fmt.Errorf("verified boot needs make pki image (%s): %w", f, err)
			}
		}
		if _, err := os.Stat(filepath.Join(o.Out, "image", "cure.efi")); err != nil {
			return fmt.Errorf("verified boot needs the signed image: make image (with %s): %w", filepath.Join(o.Out, "pki", pki.SecureBootKeyFile), err)
		}
	}
	// OperatorService requires an operator certificate; "operator" is the
	// name curectl finds by default beside the CA (state/pki/operators/).
	oc, err := pki.IssueOperatorCert(filepath.Join(e.StateDir, "pki"), "operator", pki.RoleAdmin)
	if err != nil {
		return fmt.Errorf("operator certificate: %w", err)
	}
	e.OperatorCert, e.OperatorKey = oc.CertFile, oc.KeyFile
	return nil
}

// listen binds the coordinator's sockets (on all addresses with a site
// network: the nodes come through the bridge) and the runner stream proxy.
func (e *Env) listen() error {
	bind := "127.0.0.1:0"
	if e.Opts.Site != nil {
		bind = "0.0.0.0:0"
	}
	var err error
	if e.httpLn, err = listenTCP(bind); err != nil {
		return err
	}
	if e.grpcLn, err = listenTCP(bind); err == nil && e.Opts.SecureHTTPS {
		e.httpsLn, err = listenTCP(bind)
	}
	if err == nil && e.Opts.ProxyRunnerStreams {
		e.GRPCAddr = fmt.Sprintf("127.0.0.1:%d", e.grpcLn.Addr().(*net.TCPAddr).Port)
		e.proxy, err = newStreamProxy(e.GRPCAddr, e.Opts.Logger)
	}
	if err != nil {
		e.Close()
		return err
	}
	// Local dial addresses.
	e.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", e.httpLn.Addr().(*net.TCPAddr).Port)
	e.GRPCAddr = fmt.Sprintf("127.0.0.1:%d", e.grpcLn.Addr().(*net.TCPAddr).Port)
	return nil
}

// BuildBinaries builds provisioner-lite and curectl of the module at root
// into dir. A test process builds them once and hands every environment the
// same directory (Options.Bin).
func BuildBinaries(ctx context.Context, root, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, pkg := range []string{"provisioner-lite/cmd/provisioner-lite", "provisioner-lite/cmd/curectl"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", dir, "./"+pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return nil
}

func (e *Env) hostOS() error {
	p := filepath.Join(e.Opts.Out, "hostos", "disk.raw.zst")
	sum, size, err := fileSHA256(p)
	if err != nil {
		return err
	}
	e.HostOS = Image{Path: p, RawPath: filepath.Join(e.Opts.Out, "hostos", "disk.raw"), SHA256: sum, Size: size}
	if e.Opts.SecureHTTPS {
		return e.signHostOS()
	}
	return nil
}

// signHostOS makes the installed OS bootable under Secure Boot, as a
// site's OS image is: a copy of the host disk whose unified kernel image
// (the ESP's \EFI\BOOT\BOOTX64.EFI) is signed with the site's key.
func (e *Env) signHostOS() error {
	raw := filepath.Join(e.Opts.Work, "hostos-signed.raw")
	if err := copyFile(e.HostOS.RawPath, raw); err != nil {
		return err
	}
	b := make([]byte, 512)
	f, err := os.Open(raw)
	if err != nil {
		return err
	}
	_, err = io.ReadFull(f, b)
	f.Close()
	if err != nil {
		return err
	}
	// MBR partition 1 (the ESP): its first LBA at 446+8.
	off := int64(binary.LittleEndian.Uint32(b[446+8:])) * 512
	img := fmt.Sprintf("%s@@%d", raw, off)
	uki, signed := filepath.Join(e.Opts.Work, "hostos-uki.efi"), filepath.Join(e.Opts.Work, "hostos-uki.signed.efi")
	pk := filepath.Join(e.StateDir, "pki")
	for _, c := range [][]string{
		{"mcopy", "-n", "-i", img, "::EFI/BOOT/BOOTX64.EFI", uki},
		{"sbsign", "--key", filepath.Join(pk, pki.SecureBootKeyFile), "--cert", filepath.Join(pk, pki.SecureBootCertFile), "--output", signed, uki},
		{"mcopy", "-o", "-i", img, signed, "::EFI/BOOT/BOOTX64.EFI"},
		{"zstd", "-q", "-f", "-T0", "-3", raw, "-o", raw + ".zst"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("signing the host OS image: %s: %w: %s", strings.Join(c, " "), err, out)
		}
	}
	sum, size, err := fileSHA256(raw + ".zst")
	if err != nil {
		return err
	}
	e.HostOS = Image{Path: raw + ".zst", RawPath: raw, SHA256: sum, Size: size}
	return nil
}

// EditManifest re-renders the node SKU with edit applied after
// Options.EditManifest. The coordinator reads manifests on every use, so the
// next run (or phase) sees the change.
func (e *Env) EditManifest(edit func(*manifests.SKU)) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.extraEdit = edit
	return e.writeManifest()
}

// writeManifest renders the qemu-nvme example with the host-OS image just built.
func (e *Env) writeManifest() error {
	sku, err := manifests.LoadSKU(filepath.Join(e.Root, "manifests", "examples", "qemu-nvme.yaml"))
	if err != nil {
		return err
	}
	sku.Spec.OS.Image = manifests.Artifact{SHA256: e.HostOS.SHA256, Size: e.HostOS.Size, Format: "raw.zst"}
	if e.Opts.EditManifest != nil {
		e.Opts.EditManifest(sku)
	}
	if e.extraEdit != nil {
		e.extraEdit(sku)
	}
	b, err := manifests.Marshal(sku)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.Opts.Work, "manifests", "qemu-nvme.yaml"), b, 0o644); err != nil {
		return err
	}
	// The validation suites, verbatim: diagnostic and burn-in runs name them.
	suites, err := filepath.Glob(filepath.Join(e.Root, "manifests", "examples", "suites", "*.yaml"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(e.Opts.Work, "manifests", "suites"), 0o755); err != nil {
		return err
	}
	for _, f := range append(suites, e.Opts.ExtraSuites...) {
		if err := copyFile(f, filepath.Join(e.Opts.Work, "manifests", "suites", filepath.Base(f))); err != nil {
			return err
		}
	}
	return nil
}

func (e *Env) startBMCs(ctx context.Context, httpPort int) error {
	for i := 1; i <= e.Opts.Nodes; i++ {
		n := &Node{
			ID:      fmt.Sprintf("node%d", i),
			MAC:     fmt.Sprintf("52:54:00:c0:de:%02x", i),
			Serial:  fmt.Sprintf("CURE-QEMU-%04d", i),
			UUID:    fmt.Sprintf("4c4c4544-0000-4000-8000-%012d", i),
			Disk:    filepath.Join(e.Opts.Work, "nodes", fmt.Sprintf("node%d-nvme.raw", i)),
			Console: filepath.Join(e.Opts.Work, "nodes", fmt.Sprintf("node%d-console.log", i)),
		}
		if err := ensureDisk(n.Disk, e.Opts.DiskBytes); err != nil {
			return err
		}
		qc := vbmc.QEMUConfig{
			Name: n.ID, MAC: n.MAC, Serial: n.Serial, UUID: n.UUID,
			DiskPath: n.Disk, MemoryMiB: e.Opts.MemoryMiB, ConsoleLog: n.Console,
			BootURL:       fmt.Sprintf("http://10.0.2.2:%d/boot.ipxe", httpPort),
			RebootTimeout: 10 * time.Second,
			DiskPort:      e.Opts.DiskPort,
			Logger:        e.Opts.Logger.With("vm", n.ID),
		}
		if e.Opts.Site != nil {
			qc.BootURL, qc.Tap = "", e.Opts.Site.Taps[i-1]
		}
		qc.DiskThrottle = e.Opts.DiskThrottle[n.ID]
		for k := 2; k < 2+e.Opts.ExtraNVMe; k++ {
			p := filepath.Join(e.Opts.Work, "nodes", fmt.Sprintf("node%d-nvme%d.raw", i, k))
			if err := ensureDisk(p, e.Opts.DiskBytes); err != nil {
				return err
			}
			n.ExtraDisks = append(n.ExtraDisks, p)
			qc.ExtraArgs = append(qc.ExtraArgs, "-drive", fmt.Sprintf("file=%s,if=none,id=x%d,format=raw", p, k),
				"-device", fmt.Sprintf("nvme,serial=%s-%d,drive=x%d", n.Serial, k, k))
		}
		var modes []string
		if e.Opts.UEFI {
			qc.OVMFCode, qc.OVMFVars = OVMFCode, OVMFVars
			modes = []string{vbmc.ModeLegacy, vbmc.ModeUEFI}
		}
		if e.Opts.SecureHTTPS {
			if err := e.secureBootNode(&qc); err != nil {
				return err
			}
			modes = []string{vbmc.ModeUEFI}
		}
		e.arm64Node(&qc, &modes, httpPort)
		m, err := vbmc.NewQEMUMachine(qc)
		if err != nil {
			return err
		}
		b, err := vbmc.New(vbmc.Config{Name: n.ID, Serial: n.Serial, UUID: n.UUID, MAC: n.MAC, Logger: e.Opts.Logger.With("bmc", n.ID),
			Firmware: e.Opts.Firmware, BootModes: modes, UefiHTTP: e.Opts.SecureHTTPS,
			// Short enough that firmware tests spend their time booting, not
			// waiting for simulated flash writes and BMC restarts.
			TaskDuration: time.Second, ResetDuration: time.Second}, m)
		if err != nil {
			return err
		}
		// HTTPS with a self-signed certificate, as real BMCs: the
		// inventory pins it, so BMC TLS verification is on in every e2e run.
		srv, err := vbmc.Listen("127.0.0.1:0", b, true)
		if err != nil {
			_ = b.Close(ctx)
			return err
		}
		e.servers = append(e.servers, srv)
		n.BMC, n.Machine = b, m
		n.BMCURL, n.BMCFingerprint = srv.URL, srv.Fingerprint()
		e.Nodes = append(e.Nodes, n)
	}
	return nil
}

func (e *Env) writeInventory() error {
	var b strings.Builder
	b.WriteString("nodes:\n")
	for _, n := range e.Nodes {
		fmt.Fprintf(&b, "  - id: %s\n    bmc: {url: %q, username: admin, password: password, fingerprint: %q}\n    macs: [%q]\n    sku: qemu-nvme\n    hostname: %s\n    serial: %s\n",
			n.ID, n.BMCURL, n.BMCFingerprint, n.MAC, n.ID, n.Serial)
	}
	return os.WriteFile(filepath.Join(e.Opts.Work, "nodes.yaml"), []byte(b.String()), 0o644)
}

// StartCoordinator starts provisioner-lite on the environment's state.
func (e *Env) StartCoordinator(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	logPath := filepath.Join(e.Opts.Work, "coordinator.log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	// The listening sockets, inherited as fd:3, fd:4 and (HTTPS boot) fd:5.
	var files []*os.File
	defer func() {
		for _, lf := range files {
			lf.Close()
		}
	}()
	for _, l := range []*net.TCPListener{e.httpLn, e.grpcLn, e.httpsLn} {
		if l == nil {
			continue
		}
		lf, err := l.File()
		if err != nil {
			f.Close()
			return err
		}
		files = append(files, lf)
	}
	cmd := exec.Command(filepath.Join(e.Bin, "provisioner-lite"), e.coordinatorArgs()...)
	var w io.Writer = f
	if e.Opts.CoordinatorLog != nil {
		w = io.MultiWriter(f, e.Opts.CoordinatorLog)
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.ExtraFiles = files
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	e.coord, e.coordOut, e.coordExited = cmd, f, exited
	if e.conn == nil {
		if err := e.dialOperator(); err != nil {
			return err
		}
	}
	// The sockets accept from the start (they are ours): ready is when the
	// coordinator answers an RPC, failed is when it exits first.
	return e.waitReady(ctx, exited, logPath, 60*time.Second)
}

// coordinatorArgs is provisioner-lite's command line for this environment.
func (e *Env) coordinatorArgs() []string {
	advertise := "10.0.2.2"
	if s := e.Opts.Site; s != nil {
		advertise = s.Advertise
	}
	args := []string{
		"--state-dir", e.StateDir,
		"--manifests", filepath.Join(e.Opts.Work, "manifests"),
		"--nodes", filepath.Join(e.Opts.Work, "nodes.yaml"),
		"--image-dir", e.imageDir(),
		"--http-listen", "fd:3", // ExtraFiles[0]
		"--grpc-listen", "fd:4",
		"--advertise", advertise,
		"--import-artifact", e.HostOS.Path,
		"--phase-attempts", fmt.Sprint(e.Opts.PhaseAttempts),
		"--wait-cure", "6m",
		// A VM asks for its boot identity within seconds of its power-on,
		// and nothing else on the test network claims it: a short settle
		// keeps the suite's pace (pipeline's TestAssignmentHeldUntilClaimSettles
		// holds an assignment for real).
		"--claim-settle", "1s",
		"--wait-host", "6m",
		// The virtual BMCs run on this host: they fetch firmware from loopback.
		"--bmc-base-url", "http://" + e.HTTPAddr,
	}
	if _, err := os.Stat(ToolBundlePath(e.Opts.Out)); err == nil {
		args = append(args, "--tool-bundle", ToolBundlePath(e.Opts.Out))
	}
	if e.proxy != nil {
		// 10.0.2.2 is the host's loopback as QEMU's user network shows it.
		args = append(args, "--advertise-grpc", fmt.Sprintf("10.0.2.2:%d", e.proxy.port()))
	}
	args = append(args, e.Opts.ExtraCoordinatorArgs...)
	if e.httpsLn != nil {
		args = append(args, "--https-listen", "fd:5", "--netboot", "uefi-http")
	}
	if e.ekCA != nil {
		args = append(args, "--ek-roots", e.ekCA.dir)
	}
	return args
}

// dialOperator opens Client with the operator certificate.
func (e *Env) dialOperator() error {
	caPEM, err := os.ReadFile(filepath.Join(e.StateDir, "pki", "ca.pem"))
	if err != nil {
		return err
	}
	cert, err := pki.LoadOperatorCert(e.OperatorCert, e.OperatorKey)
	if err != nil {
		return err
	}
	tlsCfg, err := pki.ClientTLSConfig(caPEM, "127.0.0.1", &cert)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(e.GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		return err
	}
	e.conn, e.Client = conn, curev1.NewOperatorServiceClient(conn)
	return nil
}

// waitReady polls the operator API until the coordinator answers.
func (e *Env) waitReady(ctx context.Context, exited <-chan error, logPath string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := e.Client.ListNodes(cctx, &curev1.ListNodesRequest{})
		ccancel()
		if err == nil {
			return nil
		}
		select {
		case werr := <-exited:
			exited := make(chan error, 1)
			exited <- werr
			e.coordExited = exited // StopCoordinator still reads it
			return fmt.Errorf("coordinator exited before it was ready (%v; see %s)", werr, logPath)
		case <-ctx.Done():
			return fmt.Errorf("coordinator did not answer within %s (see %s): %w", d, logPath, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// listenTCP binds a TCP listener the coordinator processes inherit.
func listenTCP(addr string) (*net.TCPListener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return l.(*net.TCPListener), nil
}

// StopCoordinator stops provisioner-lite (SIGTERM, then SIGKILL).
func (e *Env) StopCoordinator(kill bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.coord == nil {
		return nil
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = e.coord.Process.Signal(sig)
	select {
	case <-e.coordExited:
	case <-time.After(20 * time.Second):
		_ = e.coord.Process.Kill()
		<-e.coordExited
	}
	e.coordOut.Close()
	e.coord = nil
	return nil
}

// Provision starts a run and returns its id.
func (e *Env) Provision(ctx context.Context, node string, mode modes.Mode, resume bool) (string, error) {
	return e.Run(ctx, node, mode, "", resume)
}

// Run starts a run with an explicit manifest (a suite for diagnostic/burn-in).
// The test names the one node it means, as an operator does who confirmed
// it: a node in the day-2 pool needs that (confirm_node_ids) for a
// provision or a wipe.
func (e *Env) Run(ctx context.Context, node string, mode modes.Mode, manifest string, resume bool) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := e.Client.Provision(cctx, &curev1.ProvisionRequest{NodeIds: []string{node}, Mode: modes.ToProto(mode), Manifest: manifest, Resume: resume,
		ConfirmNodeIds: []string{node}})
	if err != nil {
		return "", err
	}
	return resp.GetRuns()[0].GetRunId(), nil
}

// Follow streams the run's timeline to print until the run ends, then
// returns its report. A broken stream (coordinator restart) is re-opened.
// Live heartbeats (kind progress, not stored) are printed as they come and
// not counted among the stored entries a re-opened stream replays.
func (e *Env) Follow(ctx context.Context, runID string, print func(*curev1.TimelineEntry)) (*curev1.RunReport, error) {
	seen := 0
	for {
		stream, err := e.Client.Watch(ctx, &curev1.WatchRequest{RunId: runID, Follow: true})
		if err == nil {
			i := 0
			for {
				ev, rerr := stream.Recv()
				if rerr != nil {
					if rerr == io.EOF {
						return e.Report(ctx, runID)
					}
					break
				}
				if ev.GetKind() == "progress" {
					if print != nil {
						print(ev)
					}
					continue
				}
				i++
				if i > seen {
					seen = i
					if print != nil {
						print(ev)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Report fetches the run report.
func (e *Env) Report(ctx context.Context, runID string) (*curev1.RunReport, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return e.Client.Report(cctx, &curev1.ReportRequest{RunId: runID})
}

// Close stops everything: coordinator, QEMU processes, BMC servers.
func (e *Env) Close() {
	_ = e.StopCoordinator(false)
	if e.conn != nil {
		e.conn.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range e.Nodes {
		if n.BMC != nil {
			_ = n.BMC.Close(ctx)
		}
	}
	// Shutdown closes the listener (for good: a BMC reset in progress
	// cannot re-open it) and waits for requests in flight.
	for _, s := range e.servers {
		_ = s.Shutdown(ctx)
	}
	if e.proxy != nil {
		e.proxy.close()
	}
	for _, l := range []*net.TCPListener{e.httpLn, e.grpcLn, e.httpsLn} {
		if l != nil {
			l.Close()
		}
	}
}

func ensureDisk(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() < size {
		return f.Truncate(size) // sparse: a blank NVMe namespace
	}
	return nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}

func fileSHA256(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// ReadJSON is a small helper for tests reading JSON files.
func ReadJSON(p string, v any) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// imageDir is the image the coordinator serves.
func (e *Env) imageDir() string {
	if e.Opts.ImageDir != "" {
		return e.Opts.ImageDir
	}
	return filepath.Join(e.Opts.Out, "image")
}

// OVMFVarsNoKeys is a variable store with no Secure Boot keys: the
// Secure Boot build of OVMF then boots any image.
const OVMFVarsNoKeys = "/usr/share/OVMF/OVMF_VARS_4M.fd"

// secureBootNode makes qc a Secure Boot machine with a TPM that trusts the
// site's Secure Boot certificate and the coordinator's boot CA.
func (e *Env) secureBootNode(qc *vbmc.QEMUConfig) error {
	qc.OVMFCode, qc.OVMFVars, qc.SecureBoot, qc.TPM = OVMFSecureCode, OVMFSecureVars, true, true
	qc.BootURL = ""
	if e.ekCA == nil {
		ca, err := newEKCA(e.Opts.Work)
		if err != nil {
			return err
		}
		e.ekCA = ca
	}
	qc.EKCertify = e.ekCA.certify
	for _, c := range []struct {
		file string
		dst  *[][]byte
	}{{pki.SecureBootCertFile, &qc.SecureBootDB}, {pki.BootCACertFile, &qc.HTTPSCACerts}} {
		b, err := os.ReadFile(filepath.Join(e.StateDir, "pki", c.file))
		if err != nil {
			return err
		}
		ders, err := uefi.PEMCertificates(c.file, b)
		if err != nil {
			return err
		}
		*c.dst = ders
	}
	if e.Opts.SecureBootOff {
		qc.OVMFVars, qc.SecureBootDB = OVMFVarsNoKeys, nil
	}
	return nil
}
