package coordinator

import (
	"context"
	"errors"
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

// NetbootConfig is the network boot front door: proxy DHCP and TFTP on
// the provisioning network, the boot override the pipeline arms, its mode.
type NetbootConfig struct {
	pxeInterface string // Config.PXEInterface, copied in before prepare
	ProxyDHCP    bool   // --proxy-dhcp: answer PXE clients on Config.PXEInterface (needs it)
	AllMACs      bool   // --proxy-dhcp-all-macs: answer MACs not in the inventory too
	TFTPListen   string // --tftp-listen: "" (default: port 69 of the proxy's server IP with ProxyDHCP), "off", or an address
	ServerIP     string // --pxe-server-ip: the proxy's next-server (default: the interface's first IPv4 address)
	IPXEDir      string // --ipxe-dir: the iPXE builds (default /usr/lib/ipxe)
	IPXEEFI      string // --ipxe-efi: snponly.efi (default) or ipxe.efi
	Mode         string // --netboot: pxe (default) or uefi-http
	BootMode     string // --boot-mode: auto (default), uefi or legacy
}

// netbootPlan is the flags checked and the iPXE builds loaded.
type netbootPlan struct {
	flags    NetbootConfig
	target   redfish.BootTarget
	mode     redfish.BootModePolicy
	files    *netboot.Files // nil: no TFTP, proxy or HTTP builds
	tftpAddr string
	// onUnknownMAC, if set, hears of the PXE requests the proxy DHCP
	// gets from MACs not in the inventory, within their budget
	// (pipeline.Engine.UnknownMAC shows them on the runs waiting for CURE).
	onUnknownMAC func(ctx context.Context, mac, source string)
	// standby, if set, is true while another instance holds the front
	// door's lease: proxy DHCP and TFTP then answer nothing.
	standby func() bool
}

// prepare checks the flags and reads the iPXE builds, before anything
// listens: a missing build or a bad flag is an error at start.
func (n NetbootConfig) prepare(log *slog.Logger) (*netbootPlan, error) {
	if n.IPXEEFI == "" {
		n.IPXEEFI = "snponly.efi"
	}
	if n.IPXEDir == "" {
		n.IPXEDir = "/usr/lib/ipxe"
	}
	p := &netbootPlan{flags: n}
	switch n.Mode {
	case "pxe", "":
		p.target = redfish.BootPxe
	case "uefi-http":
		p.target = redfish.BootUefiHttp
	default:
		return nil, fmt.Errorf("--netboot %q: want pxe or uefi-http", n.Mode)
	}
	var err error
	if p.mode, err = redfish.ParseBootModePolicy(n.BootMode); err != nil {
		return nil, fmt.Errorf("--boot-mode: %w", err)
	}
	if p.target == redfish.BootUefiHttp && p.mode == redfish.BootModeLegacy {
		return nil, errors.New("--netboot uefi-http with --boot-mode legacy: UEFI HTTP boot needs UEFI")
	}
	if n.ProxyDHCP && n.pxeInterface == "" {
		return nil, errors.New("--proxy-dhcp needs --pxe-interface: the interface facing the nodes")
	}
	if n.IPXEEFI != "snponly.efi" && n.IPXEEFI != "ipxe.efi" {
		return nil, fmt.Errorf("--ipxe-efi %q: want snponly.efi or ipxe.efi", n.IPXEEFI)
	}
	p.tftpAddr = n.TFTPListen
	if p.tftpAddr == "off" {
		if n.ProxyDHCP {
			return nil, errors.New("--tftp-listen off with --proxy-dhcp: PXE firmware fetches iPXE over TFTP")
		}
		p.tftpAddr = ""
	}
	if p.tftpAddr == "" && !n.ProxyDHCP && p.target != redfish.BootUefiHttp {
		return p, nil // the site's DHCP chains to boot.ipxe: nothing to serve here
	}
	p.files, err = netboot.LoadFiles(n.IPXEDir, []string{"undionly.kpxe", n.IPXEEFI, netboot.ARM64EFI})
	if err != nil {
		return nil, err
	}
	if m := p.files.Missing(); len(m) > 0 {
		log.Warn("iPXE builds missing: clients of their architecture are refused", "dir", n.IPXEDir, "missing", m)
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
	if p.files == nil || !p.files.Has(p.flags.IPXEEFI) {
		return ""
	}
	return strings.TrimRight(baseURL, "/") + bootserver.IPXEBuildsPath + "/" + p.flags.IPXEEFI
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
	if p.flags.ProxyDHCP {
		if p.flags.ServerIP != "" {
			if serverIP = net.ParseIP(p.flags.ServerIP).To4(); serverIP == nil {
				return stop, fmt.Errorf("--pxe-server-ip %q: not an IPv4 address", p.flags.ServerIP)
			}
		} else if p.flags.pxeInterface != "" {
			if serverIP, err = netboot.InterfaceIPv4(p.flags.pxeInterface); err != nil {
				return stop, fmt.Errorf("--pxe-interface: %w", err)
			}
		}
	}
	if p.tftpAddr == "" && p.flags.ProxyDHCP {
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
		srv.Standby = p.standby
		go func() {
			if err := srv.Serve(conn); err != nil {
				errc <- fmt.Errorf("tftp: %w", err)
			}
		}()
		stops = append(stops, srv.Shutdown)
	}
	if !p.flags.ProxyDHCP {
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
	for a, f := range netboot.DefaultFiles(p.flags.IPXEEFI) {
		if files[f] {
			boot.Files[a] = f
		}
	}
	for a, f := range netboot.ARM64Files() {
		if files[f] {
			boot.Files[a] = f
		}
	}
	boot.HTTPBase = strings.TrimRight(baseURL, "/") + bootserver.IPXEBuildsPath
	px, err := netboot.NewProxyDHCP(netboot.Config{Interface: p.flags.pxeInterface, ServerIP: serverIP, Boot: boot,
		Inventory: inv, AnswerUnknown: p.flags.AllMACs, OnUnknown: p.unknownObserver(ctx), Log: log, Standby: p.standby})
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
