// Command vbmc runs a fleet of Redfish virtual BMCs, one per node and each
// on its own 127.0.0.1 port, each driving a QEMU VM (or an in-memory fake):
// on QEMU's user network, or on a tap device beside a site's DHCP server,
// with SeaBIOS or UEFI firmware (OVMF). README "Try it on one box" runs one.
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
)

func main() {
	if err := run(); err != nil {
		slog.Error("vbmc", "err", err)
		os.Exit(1)
	}
}

type closer interface{ Close(context.Context) error }

func run() error {
	cfgPath := flag.String("config", "", "fleet YAML (see config.go)")
	n := flag.Int("n", 0, "without -config: run this many default nodes")
	bootURL := flag.String("boot-url", "", "DHCP bootfile URL (overrides the config)")
	basePort := flag.Int("base-port", 0, "first BMC port (overrides the config)")
	workDir := flag.String("work-dir", "", "disks and console logs (overrides the config)")
	fake := flag.Bool("fake", false, "in-memory machines instead of QEMU")
	useTLS := flag.Bool("tls", false, "serve HTTPS with self-signed certificates")
	inventory := flag.String("inventory", "", "write the BMC list (name, URL, certificate fingerprint, MAC, serial) as JSON here")
	nodesYAMLPath := flag.String("nodes-yaml", "", "write a provisioner-lite node inventory for these BMCs here (fingerprints pinned with -tls)")
	debug := flag.Bool("debug", false, "debug logs")
	profileName := flag.String("profile", "", "vendor profile every BMC takes (see docs/REDFISH.md; e.g. dell-idrac9, hpe-ilo5)")
	flag.Parse()
	if *profileName != "" {
		if _, err := vbmc.ProfileByName(*profileName); err != nil {
			return err // before any machine starts
		}
	}

	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)

	var fleet *Fleet
	var err error
	switch {
	case *cfgPath != "":
		if fleet, err = loadFleet(*cfgPath); err != nil {
			return err
		}
	case *n > 0:
		fleet = generatedFleet(*n)
	default:
		return errors.New("give -config FILE or -n COUNT")
	}
	// Flags win over the file; re-validate with them applied.
	if *bootURL != "" {
		fleet.BootURL = *bootURL
	}
	if *basePort != 0 {
		fleet.BasePort = *basePort
		for i := range fleet.Nodes {
			fleet.Nodes[i].Port = 0
		}
	}
	if *workDir != "" {
		fleet.WorkDir = *workDir
	}
	fleet.Fake = fleet.Fake || *fake
	fleet.TLS = fleet.TLS || *useTLS
	if err := fleet.complete(orFlags(*cfgPath)); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var servers []*vbmc.Server
	var machines []closer
	// Tear down in reverse, always: QEMU must not outlive us.
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, s := range servers {
			if err := s.Shutdown(sctx); err != nil {
				log.Error("shutdown", "bmc", s.URL, "err", err)
			}
		}
		for _, m := range machines {
			if err := m.Close(sctx); err != nil {
				log.Error("machine close", "err", err)
			}
		}
	}()

	var inv []entry
	for _, nd := range fleet.Nodes {
		nodeDir := filepath.Join(fleet.WorkDir, nd.Name)
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			return fmt.Errorf("node %s: %w", nd.Name, err)
		}
		console := filepath.Join(nodeDir, "console.log")
		var m vbmc.Machine
		if fleet.Fake {
			m = vbmc.NewFakeMachine()
		} else {
			if err := ensureDisk(nd.Disk, nd.DiskSizeMiB); err != nil {
				return fmt.Errorf("node %s: %w", nd.Name, err)
			}
			qc := vbmc.QEMUConfig{
				Name: nd.Name, MAC: nd.MAC, Serial: nd.Serial, UUID: nd.UUID, DiskPath: nd.Disk,
				MemoryMiB: nd.MemoryMiB, ConsoleLog: console, BootURL: fleet.BootURL,
				RebootTimeout: 10 * time.Second, Logger: log,
			}
			if nd.Tap != "" {
				qc.Tap, qc.BootURL = nd.Tap, ""
			}
			if nd.UEFI {
				qc.OVMFCode, qc.OVMFVars = fleet.OVMFCode, fleet.OVMFVars
			}
			qm, err := vbmc.NewQEMUMachine(qc)
			if err != nil {
				return err
			}
			machines = append(machines, qm)
			m = qm
		}
		cfg := vbmc.Config{
			Name: nd.Name, Username: fleet.Username, Password: fleet.Password,
			Serial: nd.Serial, UUID: nd.UUID, MAC: nd.MAC,
			NoBootMode: nd.NoBootMode, NoContinuous: nd.NoContinuous, Logger: log,
		}
		if nd.UEFI {
			// A UEFI server: it powers up in UEFI; Legacy stays selectable.
			cfg.BootModes = []string{vbmc.ModeUEFI, vbmc.ModeLegacy}
		}
		if *profileName != "" {
			p, err := vbmc.ProfileByName(*profileName)
			if err != nil {
				return err
			}
			cfg = p.Apply(cfg)
		}
		b, err := vbmc.New(cfg, m)
		if err != nil {
			return err
		}
		s, err := vbmc.Listen(net.JoinHostPort(fleet.Listen, strconv.Itoa(nd.Port)), b, fleet.TLS)
		if err != nil {
			b.Close(ctx)
			return err
		}
		servers = append(servers, s)
		inv = append(inv, entry{Name: nd.Name, URL: s.URL, Fingerprint: s.Fingerprint(), MAC: nd.MAC, Serial: nd.Serial, UUID: nd.UUID,
			Username: fleet.Username, Password: fleet.Password, Console: console, SKU: nd.SKU, PasswordEnv: fleet.PasswordEnv})
		if s.Fingerprint() != "" {
			// What an operator checks out of band and pins as bmc.fingerprint.
			log.Info("BMC certificate", "bmc", nd.Name, "url", s.URL, "fingerprint", s.Fingerprint())
		}
	}
	// Both files hold the BMC password: private to the user.
	if *inventory != "" {
		b, _ := json.MarshalIndent(inv, "", "  ")
		if err := os.WriteFile(*inventory, append(b, '\n'), 0o600); err != nil {
			return fmt.Errorf("write inventory: %w", err)
		}
	}
	if *nodesYAMLPath != "" {
		if err := os.WriteFile(*nodesYAMLPath, nodesYAML(inv), 0o600); err != nil {
			return fmt.Errorf("write node inventory: %w", err)
		}
	}
	log.Info("virtual BMCs ready", "count", len(servers), "fake", fleet.Fake, "bootURL", fleet.BootURL)
	<-ctx.Done()
	log.Info("shutting down: powering every VM off")
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
