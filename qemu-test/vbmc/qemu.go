package vbmc

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cure-oss/cure/tools/tail"
	"github.com/cure-oss/cure/tools/uefi"
)

// QEMUConfig describes one QEMU node.
type QEMUConfig struct {
	Name       string
	MAC        string // virtio-net MAC, e.g. 52:54:00:12:34:56
	Serial     string // SMBIOS and NVMe serial
	UUID       string // SMBIOS system UUID
	DiskPath   string // raw image behind the NVMe controller; empty: no disk
	MemoryMiB  int    // default 1024
	CPUs       int    // default 2
	ConsoleLog string // serial console, appended across boots
	// BootURL is handed out by SLIRP DHCP as the bootfile; iPXE fetches an
	// http URL directly, e.g. http://10.0.2.2:8080/boot.ipxe.
	BootURL string
	TFTPDir string // optional SLIRP TFTP root
	Romfile string // optional virtio-net option ROM (default: QEMU's own iPXE)
	// Tap attaches the NIC to this existing tap device instead of QEMU's
	// user network (no SLIRP DHCP or TFTP: whatever is on the tap's bridge
	// answers); BootURL and TFTPDir do not apply.
	Tap string
	// OVMFCode and OVMFVars (Debian's /usr/share/OVMF/OVMF_CODE.fd and
	// OVMF_VARS.fd) let the machine boot in UEFI mode: the code read-only,
	// the variable store copied once into RunDir, so the machine keeps its
	// NVRAM across boots as a server does. Without them only Legacy
	// (SeaBIOS) boots.
	OVMFCode, OVMFVars string
	// SecureBoot runs OVMF's Secure Boot build (SMM, secure flash): with
	// an OVMFVars template whose PK, KEK and db are enrolled and
	// SecureBootEnable set (Debian's OVMF_VARS_4M.snakeoil.fd or .ms.fd)
	// it refuses any image not signed by a db key.
	SecureBoot bool
	// SecureBootDB are certificates (DER) added to db when the machine's
	// variable store is first made, as a BMC's SecureBootDatabases
	// enrolment does: the site's Secure Boot signing certificate.
	SecureBootDB [][]byte
	// HTTPSCACerts are the CA certificates (DER) OVMF verifies HTTPS boot
	// servers with (fw_cfg etc/edk2/https/cacerts, an EFI signature list).
	HTTPSCACerts [][]byte
	// TPM gives the machine a TPM 2.0 (swtpm, tpm-crb) whose state lives
	// in RunDir/tpm across boots: the same endorsement key every boot, the
	// PCRs reset at each power-on.
	TPM bool
	// EKCertify makes the TPM's EK certificate (DER) for its EK's public
	// key, as a TPM manufacturer does: a test CA the coordinator's
	// --ek-roots trusts. Before the TPM's first boot it is written where
	// the TCG profile puts it. Nil: the TPM has no EK certificate.
	EKCertify func(pub crypto.PublicKey) ([]byte, error)
	// DiskThrottle slows the disk as QEMU's block throttling does (a drive
	// that enumerates and passes its checks, only slower than its peers:
	// the marginal part fleet bands exist to catch); zero: full speed.
	DiskThrottle DiskThrottle
	// RebootTimeout makes the firmware reset the machine this long after
	// "No bootable device" (0: it waits forever, QEMU's default).
	RebootTimeout time.Duration
	// GracefulTimeout bounds a graceful Stop before power is cut (default 60s).
	GracefulTimeout time.Duration
	// DiskPort, when set, puts the NVMe controller behind its own
	// pcie-root-port whose link is limited to this speed and width (QEMU's
	// x-speed/x-width): a slot slower or narrower than the SKU declares.
	DiskPort *RootPort
	Binary   string // default qemu-system-x86_64 (qemu-system-aarch64 for arm64)
	// Arch is ArchAMD64 (empty) or ArchARM64: QEMU's virt machine with
	// AAVMF (OVMFCode/OVMFVars default to it), UEFI only (arm64.go).
	Arch string
	// Direct boots the kernels an arm64 node's loaders would (DirectBoot).
	Direct    *DirectBoot
	RunDir    string // QMP socket directory (default: a new temp dir)
	ExtraArgs []string
	Logger    *slog.Logger
}

// DiskThrottle is a disk's QEMU throttling (the drive's throttling.*
// options): total bytes and I/O operations per second, reads and writes
// together; zero leaves that limit off.
type DiskThrottle struct {
	BPS, IOPS int64
}

// args are the -set options that throttle drive id (none when unset).
func (t DiskThrottle) args(id string) []string {
	var out []string
	if t.BPS > 0 {
		out = append(out, "-set", "drive."+id+".throttling.bps-total="+strconv.FormatInt(t.BPS, 10))
	}
	if t.IOPS > 0 {
		out = append(out, "-set", "drive."+id+".throttling.iops-total="+strconv.FormatInt(t.IOPS, 10))
	}
	return out
}

// QEMUMachine runs one QEMU process per boot, so the boot device the BMC
// chose is exactly the one QEMU boots first. Guest reboots and poweroffs
// are caught through QMP (-action reboot=shutdown, -no-shutdown) and
// reported as events; QEMU is then told to quit.
type QEMUMachine struct {
	cfg     QEMUConfig
	log     *slog.Logger
	ownDir  bool
	events  chan MachineEvent
	mu      sync.Mutex
	cur     *qemuRun
	seq     uint64
	mode    string        // BootSourceOverrideMode of the next Start: "Legacy" (default) or "UEFI"
	httpURI string        // HttpBootUri of the next UefiHttp Start
	direct  []string      // this boot's -kernel, -initrd, -append (arm64.go)
	stopped chan struct{} // closed by Close
}

type qemuRun struct {
	seq      uint64
	cmd      *exec.Cmd
	qmp      *qmpConn
	exited   chan struct{}
	waitErr  error
	stopping atomic.Bool // host-initiated stop: no event
	stderr   *tail.Buffer
	swtpm    *exec.Cmd // the boot's TPM, ended with QEMU
}

// RootPort is a pcie-root-port's link capability. QEMU 7.2 emulated
// endpoints (its NVMe) always report a 2.5 GT/s x1 link of their own; the
// port's setting is what its Link Capabilities (sysfs max_link_speed and
// max_link_width of the port) say.
type RootPort struct {
	Speed string // x-speed: 2_5, 5, 8 or 16 (GT/s)
	Width int    // x-width: 1, 2, 4, 8, 12, 16 or 32 lanes
}

var rootPortSpeeds = []string{"2_5", "5", "8", "16"}
var rootPortWidths = []int{1, 2, 4, 8, 12, 16, 32}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// NewQEMUMachine validates cfg and prepares the run directory. Nothing runs
// until Start.
func NewQEMUMachine(cfg QEMUConfig) (*QEMUMachine, error) {
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = 1024
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 2
	}
	if cfg.GracefulTimeout == 0 {
		cfg.GracefulTimeout = 60 * time.Second
	}
	where := "qemu node " + strconv.Quote(cfg.Name)
	if err := checkArch(&cfg, where); err != nil {
		return nil, err
	}
	if cfg.Binary == "" {
		cfg.Binary = "qemu-system-x86_64"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Name == "" {
		return nil, fmt.Errorf("%s: Name is required", where)
	}
	if _, err := net.ParseMAC(cfg.MAC); err != nil || len(cfg.MAC) != 17 {
		return nil, fmt.Errorf("%s: MAC %q is not a colon-separated 48-bit MAC", where, cfg.MAC)
	}
	if cfg.UUID != "" && !uuidRE.MatchString(cfg.UUID) {
		return nil, fmt.Errorf("%s: UUID %q is not in 8-4-4-4-12 hex form", where, cfg.UUID)
	}
	if cfg.DiskThrottle.BPS < 0 || cfg.DiskThrottle.IOPS < 0 {
		return nil, fmt.Errorf("%s: DiskThrottle %+v: limits per second cannot be negative", where, cfg.DiskThrottle)
	}
	if cfg.MemoryMiB < 64 {
		return nil, fmt.Errorf("%s: MemoryMiB %d is below 64", where, cfg.MemoryMiB)
	}
	if cfg.ConsoleLog == "" {
		return nil, fmt.Errorf("%s: ConsoleLog is required", where)
	}
	if cfg.Tap != "" && (cfg.BootURL != "" || cfg.TFTPDir != "") {
		return nil, fmt.Errorf("%s: Tap %q with BootURL or TFTPDir: those are QEMU user-network (SLIRP) settings", where, cfg.Tap)
	}
	if (cfg.OVMFCode == "") != (cfg.OVMFVars == "") {
		return nil, fmt.Errorf("%s: OVMFCode and OVMFVars go together (got code %q, vars %q)", where, cfg.OVMFCode, cfg.OVMFVars)
	}
	for _, f := range []string{cfg.OVMFCode, cfg.OVMFVars} {
		if f != "" {
			if _, err := os.Stat(f); err != nil {
				return nil, fmt.Errorf("%s: OVMF firmware: %w (apt install ovmf)", where, err)
			}
		}
	}
	if cfg.BootURL != "" {
		if u, err := url.Parse(cfg.BootURL); err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "tftp") {
			return nil, fmt.Errorf("%s: BootURL %q is not an http(s) or tftp URL", where, cfg.BootURL)
		}
	}
	if p := cfg.DiskPort; p != nil {
		if cfg.DiskPath == "" {
			return nil, fmt.Errorf("%s: DiskPort without DiskPath: the port holds the NVMe controller", where)
		}
		if !slices.Contains(rootPortSpeeds, p.Speed) || !slices.Contains(rootPortWidths, p.Width) {
			return nil, fmt.Errorf("%s: DiskPort speed %q width %d: want speed one of %v and width one of %v", where, p.Speed, p.Width, rootPortSpeeds, rootPortWidths)
		}
	}
	if cfg.DiskPath != "" {
		if st, err := os.Stat(cfg.DiskPath); err != nil {
			return nil, fmt.Errorf("%s: DiskPath: %w", where, err)
		} else if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: DiskPath %s is not a regular file", where, cfg.DiskPath)
		}
	}
	if _, err := exec.LookPath(cfg.Binary); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	q := &QEMUMachine{cfg: cfg, log: cfg.Logger.With("node", cfg.Name), events: make(chan MachineEvent, 16), stopped: make(chan struct{})}
	if cfg.RunDir == "" {
		// Short path: unix socket paths are limited to 108 bytes.
		d, err := os.MkdirTemp("", "vbmc-")
		if err != nil {
			return nil, fmt.Errorf("%s: run dir: %w", where, err)
		}
		q.cfg.RunDir, q.ownDir = d, true
	} else if err := os.MkdirAll(cfg.RunDir, 0o755); err != nil {
		return nil, fmt.Errorf("%s: run dir: %w", where, err)
	}
	return q, nil
}

// Boot modes (BootSourceOverrideMode values) a QEMUMachine boots.
const (
	ModeLegacy = "Legacy"
	ModeUEFI   = "UEFI"
)

// SetBootMode chooses the firmware of the next Start (ModeSetter): SeaBIOS
// for Legacy, OVMF for UEFI (which needs OVMFCode/OVMFVars).
func (q *QEMUMachine) SetBootMode(mode string) error {
	switch mode {
	case ModeLegacy:
	case ModeUEFI:
		if q.cfg.OVMFCode == "" {
			return fmt.Errorf("qemu node %s: UEFI boot needs OVMFCode and OVMFVars", q.cfg.Name)
		}
	default:
		return fmt.Errorf("qemu node %s: boot mode %q: want %s or %s", q.cfg.Name, mode, ModeLegacy, ModeUEFI)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.mode = mode
	return nil
}

// varsPath is the machine's own copy of the OVMF variable store.
func (q *QEMUMachine) varsPath() string { return filepath.Join(q.cfg.RunDir, "OVMF_VARS.fd") }

// qemuEscape doubles commas, QEMU's escape inside option values.
func qemuEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// Args is the QEMU command line for one boot from dev in the mode last set
// (pure: tested without QEMU).
func (q *QEMUMachine) Args(dev BootDevice, qmpPath string) ([]string, error) {
	c := q.cfg
	uefi := q.mode == ModeUEFI
	bootOpt, err := q.bootOption(dev)
	if err != nil {
		return nil, err
	}
	// OVMF takes the boot order from the devices' bootindex (QEMU's
	// fw_cfg bootorder), not from -boot order.
	netBoot := dev == BootPxe || dev == BootUefiHttp
	nic := nicDevice(c, uefi, uefi && netBoot && q.direct == nil)
	disk := diskDevice(c, uefi && !netBoot)
	args := q.machineArgs(uefi)
	args = append(args,
		"-chardev", "file,id=con0,path="+qemuEscape(c.ConsoleLog)+",append=on",
		"-serial", "chardev:con0",
		"-qmp", "unix:"+qemuEscape(qmpPath)+",server=on,wait=off",
		"-netdev", netdevOption(c),
		"-device", nic,
	)
	if disk != "" {
		if p := c.DiskPort; p != nil {
			args = append(args, "-device", fmt.Sprintf("pcie-root-port,id=rp0,chassis=1,x-speed=%s,x-width=%d", p.Speed, p.Width))
			disk += ",bus=rp0"
		}
		args = append(args,
			"-drive", "file="+qemuEscape(c.DiskPath)+",if=none,id=d0,format=raw,cache=writeback",
			"-device", disk)
	}
	args = append(args,
		"-device", "virtio-rng-pci",
		"-smbios", smbiosSystem(c),
		// Memory devices (type 17) as a board describes its DIMMs: QEMU
		// writes one per 16 GiB of RAM, "DIMM 0"..., each with this serial
		// (what a report names a DIMM by).
		"-smbios", "type=17,loc_pfx=DIMM,bank=BANK,manufacturer=QEMU,part=CURE-QEMU-DIMM,speed=4800,serial="+qemuEscape(orDefault(c.Serial, c.Name)+"-DIMM"),
		"-boot", bootOpt,
		// A guest reboot becomes a shutdown we observe over QMP, and
		// -no-shutdown keeps QEMU alive until we have read why.
		"-action", "reboot=shutdown",
		"-no-shutdown",
	)
	if disk != "" {
		args = append(args, c.DiskThrottle.args("d0")...)
	}
	args = append(args, q.direct...)
	return append(args, c.ExtraArgs...), nil
}

// bootOption is -boot's value for a boot from dev: the order and the
// reboot timeout. It refuses a device the machine cannot boot from in its
// mode.
func (q *QEMUMachine) bootOption(dev BootDevice) (string, error) {
	c := q.cfg
	var order string
	switch dev {
	case BootPxe, BootUefiHttp:
		if dev == BootUefiHttp && q.mode != ModeUEFI {
			return "", fmt.Errorf("qemu node %s: UEFI HTTP boot in mode %q: needs UEFI", c.Name, q.mode)
		}
		order = "n"
	case BootHdd:
		order = "c"
	default:
		return "", fmt.Errorf("qemu node %s: boot device %q is neither Pxe nor Hdd", c.Name, dev)
	}
	bootOpt := "order=" + order
	if c.RebootTimeout > 0 {
		bootOpt += ",reboot-timeout=" + strconv.FormatInt(c.RebootTimeout.Milliseconds(), 10)
	}
	return bootOpt, nil
}

// netdevOption is -netdev's value: QEMU's user network (with its boot file
// and TFTP dir), or a tap device.
func netdevOption(c QEMUConfig) string {
	netdev := "user,id=n0"
	if c.Tap != "" {
		netdev = "tap,id=n0,ifname=" + qemuEscape(c.Tap) + ",script=no,downscript=no"
	}
	if c.BootURL != "" {
		netdev += ",bootfile=" + qemuEscape(c.BootURL)
	}
	if c.TFTPDir != "" {
		netdev += ",tftp=" + qemuEscape(c.TFTPDir)
	}
	return netdev
}

// nicDevice is the NIC's -device value; bootFirst gives it bootindex 1.
func nicDevice(c QEMUConfig, uefi, bootFirst bool) string {
	// speed/duplex make the guest's link report 25 Gb/s (virtio's
	// SPEED_DUPLEX feature), which the SKU's hardware check reads.
	nic := "virtio-net-pci,netdev=n0,mac=" + c.MAC + ",speed=25000,duplex=full,addr=" + fmt.Sprintf("%#x", nicSlot)
	switch {
	case c.Romfile != "":
		nic += ",romfile=" + qemuEscape(c.Romfile)
	case uefi:
		// No option ROM: QEMU's would be iPXE's EFI driver; a server's
		// UEFI PXE is the firmware's own network stack (OVMF's here).
		nic += ",romfile="
	}
	if bootFirst {
		nic += ",bootindex=1"
	}
	return nic
}

// diskDevice is the NVMe disk's -device value ("" without a disk);
// bootFirst gives it bootindex 1.
func diskDevice(c QEMUConfig, bootFirst bool) string {
	if c.DiskPath == "" {
		return ""
	}
	disk := "nvme,serial=" + qemuEscape(orDefault(c.Serial, c.Name)) + ",drive=d0"
	if bootFirst {
		disk += ",bootindex=1"
	}
	return disk
}

// smbiosSystem is the SMBIOS system (type 1) table's -smbios value.
func smbiosSystem(c QEMUConfig) string {
	smbios := "type=1,manufacturer=CURE,product=QEMU-GPU-Node"
	if c.Serial != "" {
		smbios += ",serial=" + qemuEscape(c.Serial)
	}
	if c.UUID != "" {
		smbios += ",uuid=" + c.UUID
	}
	return smbios
}

// machineArgs are the arguments ahead of the devices: the machine, CPUs
// and memory, the UEFI firmware and its Secure Boot, the TPM.
func (q *QEMUMachine) machineArgs(uefi bool) []string {
	c := q.cfg
	args := []string{
		"-name", qemuEscape(c.Name),
		"-accel", "tcg", "-machine", q.machineType(), "-cpu", "max", // args[5] is the machine: Secure Boot adds smm=on
		"-smp", strconv.Itoa(c.CPUs), "-m", strconv.Itoa(c.MemoryMiB),
		"-nographic", "-no-user-config", "-nodefaults",
	}
	if uefi {
		if c.SecureBoot {
			// The Secure Boot build keeps its variables in SMM.
			args[5] += ",smm=on"
			args = append(args, "-global", "driver=cfi.pflash01,property=secure,value=on")
		}
		args = append(args,
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+qemuEscape(c.OVMFCode),
			"-drive", "if=pflash,format=raw,unit=1,file="+qemuEscape(q.varsPath()))
		if len(c.HTTPSCACerts) > 0 {
			args = append(args, "-fw_cfg", "name=etc/edk2/https/cacerts,file="+qemuEscape(q.cacertsPath()))
		}
	}
	if c.TPM {
		args = append(args, "-chardev", "socket,id=chrtpm,path="+qemuEscape(q.tpmSock()),
			"-tpmdev", "emulator,id=tpm0,chardev=chrtpm", "-device", "tpm-crb,tpmdev=tpm0")
	}
	return args
}

func orDefault(s, d string) string {
	if s != "" {
		return s
	}
	return d
}

// Start launches QEMU booting dev first and waits for QMP.
func (q *QEMUMachine) Start(ctx context.Context, dev BootDevice) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-q.stopped:
		return fmt.Errorf("qemu node %s: machine is closed", q.cfg.Name)
	default:
	}
	if q.cur != nil {
		return fmt.Errorf("qemu node %s: start %s: already running (pid %d)", q.cfg.Name, dev, q.cur.cmd.Process.Pid)
	}
	sock := filepath.Join(q.cfg.RunDir, "qmp.sock")
	_ = os.Remove(sock)
	if err := q.prepareDirect(ctx, dev); err != nil {
		return err
	}
	if q.mode == ModeUEFI {
		if err := q.ensureVars(); err != nil {
			return err
		}
		if err := q.armHTTPBoot(dev); err != nil {
			return err
		}
	}
	args, err := q.Args(dev, sock)
	if err != nil {
		return err
	}
	var tpm *exec.Cmd
	if q.cfg.TPM {
		if tpm, err = q.startTPM(); err != nil {
			return err
		}
	}
	// Not CommandContext: QEMU must outlive the request that powered it on.
	cmd := exec.Command(q.cfg.Binary, args...)
	stderrTail := &tail.Buffer{Max: 8 << 10}
	cmd.Stdout, cmd.Stderr = stderrTail, stderrTail
	// Die with us: a killed vbmc must not leave VMs behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		stopTPM(tpm)
		return fmt.Errorf("qemu node %s: start %s: %w", q.cfg.Name, q.cfg.Binary, err)
	}
	r := &qemuRun{cmd: cmd, exited: make(chan struct{}), stderr: stderrTail, swtpm: tpm}
	go func() {
		r.waitErr = cmd.Wait()
		stopTPM(tpm)
		close(r.exited)
	}()
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	qc, err := dialQMP(dctx, sock)
	if err != nil {
		_ = cmd.Process.Kill()
		<-r.exited
		return fmt.Errorf("qemu node %s: %w; qemu output: %s", q.cfg.Name, err, strings.TrimSpace(stderrTail.String()))
	}
	q.seq++
	r.seq, r.qmp = q.seq, qc
	q.cur = r
	q.log.Info("qemu started", "pid", cmd.Process.Pid, "boot", dev, "mode", orDefault(q.mode, ModeLegacy), "seq", r.seq)
	go q.watch(r)
	return nil
}

// ensureVars copies the OVMF variable store template once: later boots
// keep what the firmware wrote (boot entries), as a server's NVRAM does.
func (q *QEMUMachine) ensureVars() error {
	if _, err := os.Stat(q.varsPath()); err == nil {
		return nil
	}
	b, err := os.ReadFile(q.cfg.OVMFVars)
	if err != nil {
		return fmt.Errorf("qemu node %s: OVMF variable store template: %w", q.cfg.Name, err)
	}
	if len(q.cfg.SecureBootDB) > 0 {
		if b, err = enrolDB(q.cfg.OVMFVars, b, q.cfg.SecureBootDB); err != nil {
			return fmt.Errorf("qemu node %s: %w", q.cfg.Name, err)
		}
	}
	if len(q.cfg.HTTPSCACerts) > 0 {
		esl, err := uefi.SignatureList(vbmcOwner, q.cfg.HTTPSCACerts...)
		if err != nil {
			return fmt.Errorf("qemu node %s: HTTPS boot CA: %w", q.cfg.Name, err)
		}
		if err := os.WriteFile(q.cacertsPath(), esl, 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(q.varsPath(), b, 0o600); err != nil {
		return fmt.Errorf("qemu node %s: OVMF variable store: %w", q.cfg.Name, err)
	}
	return nil
}

// watch turns the guest's SHUTDOWN into an event, quits QEMU and reaps it.
func (q *QEMUMachine) watch(r *qemuRun) {
	var ev *MachineEvent
	evs := r.qmp.Events()
loop:
	for {
		select {
		case e, ok := <-evs:
			if !ok {
				break loop
			}
			if e.Event != "SHUTDOWN" {
				continue
			}
			var d struct {
				Guest  bool   `json:"guest"`
				Reason string `json:"reason"`
			}
			_ = json.Unmarshal(e.Data, &d)
			q.log.Info("qemu shutdown event", "guest", d.Guest, "reason", d.Reason, "seq", r.seq)
			if ev == nil && d.Guest {
				switch d.Reason {
				case "guest-reset":
					ev = &MachineEvent{Kind: GuestReset, Reason: d.Reason}
				case "guest-shutdown":
					ev = &MachineEvent{Kind: GuestPoweroff, Reason: d.Reason}
				case "guest-panic":
					ev = &MachineEvent{Kind: Exited, Reason: d.Reason, Err: errors.New("guest panicked")}
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if _, err := r.qmp.execute(ctx, "quit", nil); err != nil {
				q.log.Debug("qmp quit", "err", err)
			}
			cancel()
		case <-r.exited:
			break loop
		}
	}
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		q.log.Warn("qemu did not exit after quit; killing", "pid", r.cmd.Process.Pid)
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
	r.qmp.Close()
	q.mu.Lock()
	if q.cur == r {
		q.cur = nil
	}
	q.mu.Unlock()
	if r.stopping.Load() {
		return
	}
	if ev == nil {
		ev = &MachineEvent{Kind: Exited, Reason: "exited",
			Err: fmt.Errorf("qemu exited unexpectedly (%v); output: %s", r.waitErr, strings.TrimSpace(r.stderr.String()))}
	}
	ev.Boot = r.seq
	q.log.Info("machine event", "event", ev.Kind, "reason", ev.Reason, "seq", r.seq)
	q.events <- *ev
}

// Stop powers off: force quits QEMU; graceful presses the ACPI power button
// and cuts power after GracefulTimeout.
func (q *QEMUMachine) Stop(ctx context.Context, force bool) error {
	q.mu.Lock()
	r := q.cur
	q.mu.Unlock()
	if r == nil {
		return nil
	}
	r.stopping.Store(true)
	if !force {
		if _, err := r.qmp.execute(ctx, "system_powerdown", nil); err != nil {
			q.log.Warn("graceful powerdown failed; forcing", "err", err)
		} else {
			t := time.NewTimer(q.cfg.GracefulTimeout)
			defer t.Stop()
			select {
			case <-r.exited:
				return q.reaped(ctx, r)
			case <-t.C:
				q.log.Warn("guest ignored ACPI powerdown; forcing off", "after", q.cfg.GracefulTimeout)
			case <-ctx.Done():
			}
		}
	}
	qctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := r.qmp.execute(qctx, "quit", nil)
	cancel()
	if err != nil {
		q.log.Debug("qmp quit failed; killing", "err", err)
		_ = r.cmd.Process.Kill()
	}
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
	return q.reaped(ctx, r)
}

// reaped waits until watch has released the run, so Running is false and a
// new Start can follow immediately.
func (q *QEMUMachine) reaped(ctx context.Context, r *qemuRun) error {
	for {
		q.mu.Lock()
		done := q.cur != r
		q.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("qemu node %s: waiting for pid %d to be reaped: %w", q.cfg.Name, r.cmd.Process.Pid, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (q *QEMUMachine) Running() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cur != nil
}

func (q *QEMUMachine) Events() <-chan MachineEvent { return q.events }

// Close forces the VM off and removes the run directory if it made it.
func (q *QEMUMachine) Close(ctx context.Context) error {
	select {
	case <-q.stopped:
		return nil
	default:
	}
	err := q.Stop(ctx, true)
	q.mu.Lock()
	close(q.stopped)
	q.mu.Unlock()
	if q.ownDir {
		_ = os.RemoveAll(q.cfg.RunDir)
	}
	return err
}

// HumanMonitorCommand runs a QEMU monitor (HMP) command on the running
// machine through QMP's human-monitor-command and returns what the monitor
// printed: tests inject faults with it ("mce 0 9 0x9c00000000000090 0
// 0x1000 0x86" logs a corrected memory error in CPU 0's bank 9).
func (q *QEMUMachine) HumanMonitorCommand(ctx context.Context, line string) (string, error) {
	q.mu.Lock()
	r := q.cur
	q.mu.Unlock()
	if r == nil {
		return "", fmt.Errorf("qemu node %s: monitor command %q: the machine is off", q.cfg.Name, line)
	}
	raw, err := r.qmp.execute(ctx, "human-monitor-command", map[string]string{"command-line": line})
	if err != nil {
		return "", fmt.Errorf("qemu node %s: monitor command %q: %w", q.cfg.Name, line, err)
	}
	var out string
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", fmt.Errorf("qemu node %s: monitor command %q: reply %s: %w", q.cfg.Name, line, raw, err)
	}
	return out, nil
}
