// Command vbmc runs a fleet of Redfish virtual BMCs, one per node and each
// on its own 127.0.0.1 port, each driving a QEMU VM (or an in-memory fake):
// on QEMU's user network, or on a tap device beside a site's DHCP server,
// with SeaBIOS or UEFI firmware (OVMF). docs/SITE.md's walk runs one.
//
//	vbmc -config fleet.yaml
//	vbmc -n 3 -boot-url http://10.0.2.2:8080/boot.ipxe
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cure-oss/cure/qemu-test/vbmc"
	"github.com/cure-oss/cure/tools/version"
)

func main() {
	if err := run(); err != nil {
		slog.Error("vbmc", "err", err)
		os.Exit(1)
	}
}

type closer interface{ Close(context.Context) error }

// cliFlags are vbmc's command-line flags.
type cliFlags struct {
	cfgPath, bootURL, workDir, inventory, nodesYAML, profile string
	n, basePort                                              int
	fake, tls, debug                                         bool
}

func parseFlags() cliFlags {
	var f cliFlags
	flag.StringVar(&f.cfgPath, "config", "", "fleet YAML (see config.go)")
	flag.IntVar(&f.n, "n", 0, "without -config: run this many default nodes")
	flag.StringVar(&f.bootURL, "boot-url", "", "DHCP bootfile URL (overrides the config)")
	flag.IntVar(&f.basePort, "base-port", 0, "first BMC port (overrides the config)")
	flag.StringVar(&f.workDir, "work-dir", "", "disks and console logs (overrides the config)")
	flag.BoolVar(&f.fake, "fake", false, "in-memory machines instead of QEMU")
	flag.BoolVar(&f.tls, "tls", false, "serve HTTPS with self-signed certificates")
	flag.StringVar(&f.inventory, "inventory", "", "write the BMC list (name, URL, certificate fingerprint, MAC, serial) as JSON here")
	flag.StringVar(&f.nodesYAML, "nodes-yaml", "", "write a provisioner-lite node inventory for these BMCs here (fingerprints pinned with -tls)")
	flag.BoolVar(&f.debug, "debug", false, "debug logs")
	flag.StringVar(&f.profile, "profile", "", "vendor profile every BMC takes (see docs/REDFISH.md; e.g. dell-idrac9, hpe-ilo5)")
	printVersion := version.Flag(flag.CommandLine, "vbmc")
	flag.Parse()
	if printVersion(os.Stdout) {
		os.Exit(0)
	}
	return f
}

func run() error {
	fl := parseFlags()
	if fl.profile != "" {
		if _, err := vbmc.ProfileByName(fl.profile); err != nil {
			return err // before any machine starts
		}
	}

	level := slog.LevelInfo
	if fl.debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)

	fleet, err := fleetFromFlags(fl)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// Tear down in reverse, always: QEMU must not outlive us.
	bs := &bmcSet{log: log}
	defer bs.close()

	var inv []entry
	for _, nd := range fleet.Nodes {
		e, err := bs.start(ctx, fleet, nd, fl.profile)
		if err != nil {
			return err
		}
		inv = append(inv, e)
	}
	if err := writeInventories(inv, fl.inventory, fl.nodesYAML); err != nil {
		return err
	}
	log.Info("virtual BMCs ready", "count", len(bs.servers), "fake", fleet.Fake, "bootURL", fleet.BootURL)
	<-ctx.Done()
	log.Info("shutting down: powering every VM off")
	return nil
}

// fleetFromFlags loads the fleet from -config or generates -n nodes, then
// applies the flags, which win over the file, and validates the result.
func fleetFromFlags(fl cliFlags) (*Fleet, error) {
	var fleet *Fleet
	switch {
	case fl.cfgPath != "":
		var err error
		if fleet, err = loadFleet(fl.cfgPath); err != nil {
			return nil, err
		}
	case fl.n > 0:
		fleet = generatedFleet(fl.n)
	default:
		return nil, errors.New("give -config FILE or -n COUNT")
	}
	if fl.bootURL != "" {
		fleet.BootURL = fl.bootURL
	}
	if fl.basePort != 0 {
		fleet.BasePort = fl.basePort
		for i := range fleet.Nodes {
			fleet.Nodes[i].Port = 0
		}
	}
	if fl.workDir != "" {
		fleet.WorkDir = fl.workDir
	}
	fleet.Fake = fleet.Fake || fl.fake
	fleet.TLS = fleet.TLS || fl.tls
	if err := fleet.complete(orFlags(fl.cfgPath)); err != nil {
		return nil, err
	}
	return fleet, nil
}

// bmcSet is the running BMCs and the QEMU machines under them.
type bmcSet struct {
	log      *slog.Logger
	servers  []*vbmc.Server
	machines []closer
}

// close shuts every BMC down, then powers every machine off.
func (bs *bmcSet) close() {
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range bs.servers {
		if err := s.Shutdown(sctx); err != nil {
			bs.log.Error("shutdown", "bmc", s.URL, "err", err)
		}
	}
	for _, m := range bs.machines {
		if err := m.Close(sctx); err != nil {
			bs.log.Error("machine close", "err", err)
		}
	}
}

// start brings up node nd's machine and its BMC, and returns its
// inventory entry.
func (bs *bmcSet) start(ctx context.Context, fleet *Fleet, nd Node, profile string) (entry, error) {
	nodeDir := filepath.Join(fleet.WorkDir, nd.Name)
	if err := os.MkdirAll(nodeDir, 0o755); err != nil {
		return entry{}, fmt.Errorf("node %s: %w", nd.Name, err)
	}
	console := filepath.Join(nodeDir, "console.log")
	m, err := bs.newMachine(fleet, nd, console)
	if err != nil {
		return entry{}, err
	}
	cfg := vbmc.Config{
		Name: nd.Name, Username: fleet.Username, Password: fleet.Password,
		Serial: nd.Serial, UUID: nd.UUID, MAC: nd.MAC,
		NoBootMode: nd.NoBootMode, NoContinuous: nd.NoContinuous, Logger: bs.log,
	}
	if nd.UEFI {
		// A UEFI server: it powers up in UEFI; Legacy stays selectable.
		cfg.BootModes = []string{vbmc.ModeUEFI, vbmc.ModeLegacy}
	}
	if profile != "" {
		p, err := vbmc.ProfileByName(profile)
		if err != nil {
			return entry{}, err
		}
		cfg = p.Apply(cfg)
	}
	b, err := vbmc.New(cfg, m)
	if err != nil {
		return entry{}, err
	}
	s, err := vbmc.Listen(net.JoinHostPort(fleet.Listen, strconv.Itoa(nd.Port)), b, fleet.TLS)
	if err != nil {
		b.Close(ctx)
		return entry{}, err
	}
	bs.servers = append(bs.servers, s)
	if s.Fingerprint() != "" {
		// What an operator checks out of band and pins as bmc.fingerprint.
		bs.log.Info("BMC certificate", "bmc", nd.Name, "url", s.URL, "fingerprint", s.Fingerprint())
	}
	return entry{Name: nd.Name, URL: s.URL, Fingerprint: s.Fingerprint(), MAC: nd.MAC, Serial: nd.Serial, UUID: nd.UUID,
		Username: fleet.Username, Password: fleet.Password, Console: console, SKU: nd.SKU, PasswordEnv: fleet.PasswordEnv}, nil
}

// newMachine makes node nd's machine: in memory with -fake, else a QEMU VM
// on its disk (created blank if missing), which close powers off.
func (bs *bmcSet) newMachine(fleet *Fleet, nd Node, console string) (vbmc.Machine, error) {
	if fleet.Fake {
		return vbmc.NewFakeMachine(), nil
	}
	if err := ensureDisk(nd.Disk, nd.DiskSizeMiB); err != nil {
		return nil, fmt.Errorf("node %s: %w", nd.Name, err)
	}
	qc := vbmc.QEMUConfig{
		Name: nd.Name, MAC: nd.MAC, Serial: nd.Serial, UUID: nd.UUID, DiskPath: nd.Disk,
		MemoryMiB: nd.MemoryMiB, ConsoleLog: console, BootURL: fleet.BootURL,
		RebootTimeout: 10 * time.Second, Logger: bs.log,
	}
	if nd.Tap != "" {
		qc.Tap, qc.BootURL = nd.Tap, ""
	}
	if nd.UEFI {
		qc.OVMFCode, qc.OVMFVars = fleet.OVMFCode, fleet.OVMFVars
	}
	qm, err := vbmc.NewQEMUMachine(qc)
	if err != nil {
		return nil, err
	}
	bs.machines = append(bs.machines, qm)
	return qm, nil
}

// writeInventories writes the -inventory JSON and the -nodes-yaml node
// inventory, each when asked for. Both hold the BMC password: private to
// the user.
func writeInventories(inv []entry, inventory, nodesYAMLPath string) error {
	if inventory != "" {
		b, _ := json.MarshalIndent(inv, "", "  ")
		if err := os.WriteFile(inventory, append(b, '\n'), 0o600); err != nil {
			return fmt.Errorf("write inventory: %w", err)
		}
	}
	if nodesYAMLPath != "" {
		if err := os.WriteFile(nodesYAMLPath, nodesYAML(inv), 0o600); err != nil {
			return fmt.Errorf("write node inventory: %w", err)
		}
	}
	return nil
}

// entry is one BMC as -inventory lists it.
type entry struct {
	Name, URL, Fingerprint, MAC, Serial, UUID, Username, Password, Console string
	SKU, PasswordEnv                                                       string `json:",omitempty"`
}

// nodesYAML renders the BMCs as a provisioner-lite node inventory: HTTPS
// BMCs pinned by their certificate's fingerprint, plain HTTP ones marked
// insecure (the coordinator refuses http:// otherwise).
func nodesYAML(inv []entry) []byte {
	var b strings.Builder
	b.WriteString("nodes:\n")
	for _, e := range inv {
		tls := "insecure: true"
		if e.Fingerprint != "" {
			tls = "fingerprint: " + strconv.Quote(e.Fingerprint)
		}
		pw := "password: " + strconv.Quote(e.Password)
		if e.PasswordEnv != "" {
			pw = "passwordEnv: " + e.PasswordEnv // the coordinator reads it from its environment
		}
		fmt.Fprintf(&b, "  - id: %s\n    bmc: {url: %q, username: %q, %s, %s}\n    macs: [%q]\n    serial: %q\n",
			e.Name, e.URL, e.Username, pw, tls, e.MAC, e.Serial)
		if e.SKU != "" {
			fmt.Fprintf(&b, "    sku: %s\n", e.SKU)
		}
	}
	return []byte(b.String())
}

func orFlags(path string) string {
	if path == "" {
		return "flags"
	}
	return path
}

// ensureDisk creates a sparse raw disk if there is none (a blank node).
func ensureDisk(path string, sizeMiB int64) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("create disk: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(sizeMiB << 20); err != nil {
		return fmt.Errorf("size disk %s to %d MiB: %w", path, sizeMiB, err)
	}
	return nil
}
