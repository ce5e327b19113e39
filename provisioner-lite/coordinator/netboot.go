package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/cure-oss/cure/provisioner-lite/bootserver"
	"github.com/cure-oss/cure/provisioner-lite/netboot"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/insomniacslk/dhcp/iana"
)

// netbootFlags are the network boot front door: proxy DHCP and TFTP on
// the provisioning network, the boot override the pipeline arms, its mode.
type netbootFlags struct {
	pxeInterface string // the config's --pxe-interface, copied in before prepare
	proxyDHCP    bool
	allMACs      bool
	tftpListen   string
	serverIP     string
	ipxeDir      string
	ipxeEFI      string
	netboot      string
	bootMode     string
}

func (n *netbootFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&n.proxyDHCP, "proxy-dhcp", false, "answer PXE clients on UDP 67 and 4011 of --pxe-interface beside the site's DHCP server "+
		"(never hands out addresses): firmware gets an iPXE build over TFTP, iPXE gets the boot script URL")
	fs.BoolVar(&n.allMACs, "proxy-dhcp-all-macs", false, "answer PXE clients whose MAC is not in the node inventory too (default: only inventory MACs, "+
		"so other machines on the network are left to whatever else answers them)")
	fs.StringVar(&n.tftpListen, "tftp-listen", "", "serve the iPXE builds over TFTP (read-only) on this address; "+
		"default with --proxy-dhcp: port 69 on the proxy's server IP; \"off\" disables")
	fs.StringVar(&n.serverIP, "pxe-server-ip", "", "next-server and DHCP server identifier the proxy announces (default: the first IPv4 address of --pxe-interface)")
	fs.StringVar(&n.ipxeDir, "ipxe-dir", "/usr/lib/ipxe", "directory of the iPXE builds (Debian's ipxe package): undionly.kpxe for BIOS, the --ipxe-efi build for x86-64 UEFI")
	fs.StringVar(&n.ipxeEFI, "ipxe-efi", "snponly.efi", "iPXE build for x86-64 UEFI clients: snponly.efi (the firmware's own NIC driver, only the booting NIC) "+
		"or ipxe.efi (iPXE's native drivers)")
	fs.StringVar(&n.netboot, "netboot", "pxe", "boot override that brings a node into CURE: pxe, or uefi-http (UEFI HTTP boot where the BMC offers UefiHttp; PXE elsewhere)")
	fs.StringVar(&n.bootMode, "boot-mode", "auto", "BootSourceOverrideMode of that override: auto (UEFI where the BMC offers it), uefi, or legacy")
}

// netbootPlan is the flags checked and the iPXE builds loaded.
type netbootPlan struct {
	flags    netbootFlags
	target   redfish.BootTarget
	mode     redfish.BootModePolicy
	files    *netboot.Files // nil: no TFTP, proxy or HTTP builds
	tftpAddr string
	// onUnknownMAC, if set, hears of the PXE requests the proxy DHCP
	// gets from MACs not in the inventory, within their budget
	// (pipeline.Engine.UnknownMAC shows them on the runs waiting for CURE).
	onUnknownMAC func(ctx context.Context, mac, source string)
}

// prepare checks the flags and reads the iPXE builds, before anything
// listens: a missing build or a bad flag is an error at start.
func (n netbootFlags) prepare(log *slog.Logger) (*netbootPlan, error) {
	if n.ipxeEFI == "" {
		n.ipxeEFI = "snponly.efi"
	}
	if n.ipxeDir == "" {
		n.ipxeDir = "/usr/lib/ipxe"
	}
	p := &netbootPlan{flags: n}
	switch n.netboot {
	case "pxe", "":
		p.target = redfish.BootPxe
	case "uefi-http":
		p.target = redfish.BootUefiHttp
	default:
		return nil, fmt.Errorf("--netboot %q: want pxe or uefi-http", n.netboot)
	}
	var err error
	if p.mode, err = redfish.ParseBootModePolicy(n.bootMode); err != nil {
		return nil, fmt.Errorf("--boot-mode: %w", err)
	}
	if p.target == redfish.BootUefiHttp && p.mode == redfish.BootModeLegacy {
		return nil, errors.New("--netboot uefi-http with --boot-mode legacy: UEFI HTTP boot needs UEFI")
	}
	if n.proxyDHCP && n.pxeInterface == "" {
		return nil, errors.New("--proxy-dhcp needs --pxe-interface: the interface facing the nodes")
	}
	if n.ipxeEFI != "snponly.efi" && n.ipxeEFI != "ipxe.efi" {
		return nil, fmt.Errorf("--ipxe-efi %q: want snponly.efi or ipxe.efi", n.ipxeEFI)
	}
	p.tftpAddr = n.tftpListen
	if p.tftpAddr == "off" {
		if n.proxyDHCP {
			return nil, errors.New("--tftp-listen off with --proxy-dhcp: PXE firmware fetches iPXE over TFTP")
		}
		p.tftpAddr = ""
	}
	if p.tftpAddr == "" && !n.proxyDHCP && p.target != redfish.BootUefiHttp {
		return p, nil // the site's DHCP chains to boot.ipxe: nothing to serve here
	}
	p.files, err = netboot.LoadFiles(n.ipxeDir, []string{"undionly.kpxe", n.ipxeEFI})
	if err != nil {
		return nil, err
	}
	if m := p.files.Missing(); len(m) > 0 {
		log.Warn("iPXE builds missing: clients of their architecture are refused", "dir", n.ipxeDir, "missing", m)
	}
	return p, nil
}

// builds is the HTTP handler of the iPXE builds (nil without them).
func (p *netbootPlan) builds() http.Handler {
	if p.files == nil {
		return nil
	}
	return p.files.Handler()
}

// httpBootURI is the iPXE EFI build's URL for UefiHttp overrides.
func (p *netbootPlan) httpBootURI(baseURL string) string {
	if p.files == nil || !p.files.Has(p.flags.ipxeEFI) {
		return ""
	}
	return strings.TrimRight(baseURL, "/") + bootserver.IPXEBuildsPath + "/" + p.flags.ipxeEFI
}

// start runs TFTP and the proxy DHCP until ctx ends; a serving error is
// sent on errc. stop waits for both.
func (p *netbootPlan) start(ctx context.Context, log *slog.Logger, scriptURL, baseURL string, st *store.Store, errc chan<- error) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, f := range stops {
			f()
		}
	}
	var serverIP net.IP
	if p.flags.proxyDHCP {
		if p.flags.serverIP != "" {
			if serverIP = net.ParseIP(p.flags.serverIP).To4(); serverIP == nil {
				return stop, fmt.Errorf("--pxe-server-ip %q: not an IPv4 address", p.flags.serverIP)
			}
		} else if p.flags.pxeInterface != "" {
			if serverIP, err = netboot.InterfaceIPv4(p.flags.pxeInterface); err != nil {
				return stop, fmt.Errorf("--pxe-interface: %w", err)
			}
		}
	}
	if p.tftpAddr == "" && p.flags.proxyDHCP {
		p.tftpAddr = net.JoinHostPort(serverIP.String(), "69")
	}
	if p.tftpAddr != "" {
		conn, err := net.ListenPacket("udp4", p.tftpAddr)
		if err != nil {
			return stop, fmt.Errorf("--tftp-listen: %w", err)
		}
		srv, err := netboot.NewTFTP(p.files, netboot.TFTPLimits{}, log)
		if err != nil {
			conn.Close()
			return stop, err
		}
		go func() {
			if err := srv.Serve(conn); err != nil {
				errc <- fmt.Errorf("tftp: %w", err)
			}
		}()
		stops = append(stops, srv.Shutdown)
	}
	if !p.flags.proxyDHCP {
		return stop, nil
	}
	// The inventory check runs for every request, floods included: the
	// proxy holds the inventory's MACs in memory and reads them again in
	// the background.
	inv, err := netboot.NewMACInventory(ctx, st.MACIndex, log)
	if err != nil {
		stop()
		return func() {}, fmt.Errorf("proxy DHCP: %w", err)
	}
	files := map[string]bool{}
	for _, n := range p.files.Names() {
		files[n] = true
	}
	boot := netboot.Boot{Files: map[iana.Arch]string{}, ScriptURL: scriptURL}
	for a, f := range netboot.DefaultFiles(p.flags.ipxeEFI) {
		if files[f] {
			boot.Files[a] = f
		}
	}
	boot.HTTPBase = strings.TrimRight(baseURL, "/") + bootserver.IPXEBuildsPath
	px, err := netboot.NewProxyDHCP(netboot.Config{Interface: p.flags.pxeInterface, ServerIP: serverIP, Boot: boot,
		Inventory: inv, AnswerUnknown: p.flags.allMACs, OnUnknown: p.unknownObserver(ctx), Log: log})
	if err != nil {
		stop()
		return func() {}, err
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := px.Serve(pctx); err != nil {
			errc <- err
		}
	}()
	stops = append([]func(){func() { cancel(); <-done }}, stops...)
	return stop, nil
}

// unknownObserver is the proxy DHCP's OnUnknown (nil without an observer).
func (p *netbootPlan) unknownObserver(ctx context.Context) func(mac, source string) {
	if p.onUnknownMAC == nil {
		return nil
	}
	return func(mac, source string) { p.onUnknownMAC(ctx, mac, source) }
}
