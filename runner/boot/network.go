package boot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/u-root/u-root/pkg/dhclient"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Lease is the DHCPv4 configuration the node took.
type Lease struct {
	Iface   string
	MAC     string
	IP      net.IP
	Mask    net.IPMask
	Gateway net.IP
	Server  net.IP // DHCP server identifier
}

func (l *Lease) String() string {
	ones, _ := l.Mask.Size()
	return fmt.Sprintf("%s %s/%d gw %s (dhcp server %s, mac %s)", l.Iface, l.IP, ones, l.Gateway, l.Server, l.MAC)
}

// NetworkOptions tunes ConfigureNetwork; zero values mean defaults.
type NetworkOptions struct {
	CarrierTimeout time.Duration // wait for carrier on any link (default 10s)
	DHCPTimeout    time.Duration // one DHCP exchange (default 5s)
	DHCPRetries    int           // per attempt (default 3)
	Attempts       int           // whole link-up+DHCP attempts (default 5)
	OnCarrier      func()        // called when a link has carrier, before DHCP (the boot timeline's link_up)
}

func (o *NetworkOptions) defaults() {
	if o.CarrierTimeout == 0 {
		o.CarrierTimeout = 10 * time.Second
	}
	if o.DHCPTimeout == 0 {
		o.DHCPTimeout = 5 * time.Second
	}
	if o.DHCPRetries == 0 {
		o.DHCPRetries = 3
	}
	if o.Attempts == 0 {
		o.Attempts = 5
	}
}

// ConfigureNetwork brings every non-loopback link up, waits for carrier,
// runs DHCPv4 on all of them at once and configures the first lease
// (address, routes, resolv.conf). The kernel RNG must be initialised or
// the DHCP client blocks: QEMU needs virtio-rng.
func ConfigureNetwork(ctx context.Context, log *slog.Logger, opts ...NetworkOptions) (*Lease, error) {
	var o NetworkOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	o.defaults()
	if log == nil {
		log = slog.Default()
	}
	if lo, err := netlink.LinkByName("lo"); err == nil {
		if err := netlink.LinkSetUp(lo); err != nil {
			log.Warn("bringing loopback up failed", "err", err)
		}
	}
	var lastErr error
	for attempt := 1; attempt <= o.Attempts; attempt++ {
		lease, err := configureOnce(ctx, log, o)
		if err == nil {
			return lease, nil
		}
		lastErr = err
		log.Warn("network attempt failed", "attempt", attempt, "of", o.Attempts, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("configuring network: %w (last error: %v)", ctx.Err(), lastErr)
		case <-time.After(time.Duration(attempt) * time.Second):
		}
	}
	return nil, fmt.Errorf("configuring network: no DHCPv4 lease after %d attempts: %w", o.Attempts, lastErr)
}

func configureOnce(ctx context.Context, log *slog.Logger, o NetworkOptions) (*Lease, error) {
	links, err := candidateLinks()
	if err != nil {
		return nil, err
	}
	if len(links) == 0 {
		return nil, errors.New("no ethernet interface found (is the NIC driver loaded?)")
	}
	for _, l := range links {
		if err := netlink.LinkSetUp(l); err != nil {
			log.Warn("link up failed", "iface", l.Attrs().Name, "err", err)
			continue
		}
		log.Info("link set up", "iface", l.Attrs().Name, "mac", l.Attrs().HardwareAddr.String())
	}
	withCarrier := waitCarrier(ctx, links, o.CarrierTimeout)
	if len(withCarrier) == 0 {
		// Some drivers never report carrier; try DHCP everywhere rather than give up.
		log.Warn("no link reported carrier; trying DHCP on all links", "waited", o.CarrierTimeout)
		withCarrier = links
	} else if o.OnCarrier != nil {
		o.OnCarrier()
	}
	names := make([]string, 0, len(withCarrier))
	for _, l := range withCarrier {
		names = append(names, l.Attrs().Name)
	}
	log.Info("requesting DHCPv4 lease", "ifaces", names)

	dctx, cancel := context.WithTimeout(ctx, time.Duration(o.DHCPRetries+1)*o.DHCPTimeout+5*time.Second)
	defer cancel()
	results := requestLeases(dctx, withCarrier, o, log)
	var errs []error
	for r := range results {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.Interface.Attrs().Name, r.Err))
			continue
		}
		if err := r.Lease.Configure(); err != nil {
			errs = append(errs, fmt.Errorf("%s: configuring lease: %w", r.Interface.Attrs().Name, err))
			continue
		}
		cancel() // the other requests are no longer needed
		ack, _ := r.Lease.Message()
		lease := leaseFromACK(r.Interface.Attrs().Name, r.Interface.Attrs().HardwareAddr, ack)
		log.Info("DHCPv4 lease configured", "lease", lease.String())
		go func() { // drain so the senders finish
			for range results {
			}
		}()
		return lease, nil
	}
	return nil, fmt.Errorf("DHCPv4 on %v: %w", names, errors.Join(errs...))
}

// dhcpResult is one link's DHCPv4 outcome.
type dhcpResult struct {
	Interface netlink.Link
	Lease     *dhclient.Packet4
	Err       error
}

// requestLeases runs DHCPv4 on every link at once and sends each outcome on
// the returned channel, closed when all are done. Unlike u-root's
// dhclient.SendRequests it does not wait for the operational state
// (IFF_RUNNING, up to a second behind carrier): waitCarrier has already
// decided the links are usable.
func requestLeases(ctx context.Context, links []netlink.Link, o NetworkOptions, log *slog.Logger) <-chan dhcpResult {
	out := make(chan dhcpResult, len(links))
	var wg sync.WaitGroup
	for _, l := range links {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := requestLease(ctx, l, o, log)
			out <- dhcpResult{Interface: l, Lease: p, Err: err}
		}()
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out
}

// requestLease is one DISCOVER/OFFER/REQUEST/ACK exchange on one link, with
// the options u-root's client sends (class "PXE UROOT", subnet mask,
// netboot options), so DHCP servers see the same client as before.
func requestLease(ctx context.Context, l netlink.Link, o NetworkOptions, log *slog.Logger) (*dhclient.Packet4, error) {
	name := l.Attrs().Name
	c, err := nclient4.New(name, nclient4.WithTimeout(o.DHCPTimeout), nclient4.WithRetry(o.DHCPRetries))
	if err != nil {
		return nil, fmt.Errorf("DHCPv4 client on %s: %w", name, err)
	}
	defer c.Close()
	lease, err := c.Request(ctx,
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXE UROOT")),
		dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask),
		dhcpv4.WithNetboot)
	if err != nil {
		return nil, err
	}
	log.Info("got DHCPv4 lease", "iface", name, "ip", lease.ACK.YourIPAddr.String(), "server", lease.ACK.ServerIdentifier().String())
	return dhclient.NewPacket4(l, lease.ACK), nil
}

func leaseFromACK(iface string, mac net.HardwareAddr, ack *dhcpv4.DHCPv4) *Lease {
	l := &Lease{Iface: iface, MAC: mac.String()}
	if ack == nil {
		return l
	}
	l.IP = ack.YourIPAddr
	l.Mask = ack.SubnetMask()
	if r := ack.Router(); len(r) > 0 {
		l.Gateway = r[0]
	}
	l.Server = ack.ServerIdentifier()
	return l
}

// candidateLinks lists links that can take a DHCP lease: not loopback, with
// an Ethernet-sized hardware address.
func candidateLinks() ([]netlink.Link, error) {
	all, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing network links: %w", err)
	}
	var out []netlink.Link
	for _, l := range all {
		a := l.Attrs()
		if a.Flags&net.FlagLoopback != 0 || len(a.HardwareAddr) != 6 {
			continue
		}
		out = append(out, l)
	}
	return out, nil
}

// lowerUpSettle is how long a link must show carrier (IFF_LOWER_UP) before
// it counts without the operational state (IFF_RUNNING). The kernel sets
// IFF_RUNNING from its link watcher, which batches non-urgent events up to
// a second: a NIC whose carrier came on during probe (virtio-net) sits up
// to a second with carrier and working queues, not yet "running". A carrier
// that comes on after the link was set up is an urgent event, activated
// within milliseconds; the settle covers that gap, so the first DHCP
// DISCOVER is not sent into a queue not yet active.
const lowerUpSettle = 50 * time.Millisecond

// linkReady is the readiness rule for one link: running, or carrier for at
// least lowerUpSettle. carrierSince is when carrier was first seen (zero if
// never) and is updated.
func linkReady(flags uint32, now time.Time, carrierSince *time.Time) bool {
	if flags&unix.IFF_RUNNING != 0 {
		return true
	}
	if flags&unix.IFF_LOWER_UP == 0 {
		*carrierSince = time.Time{}
		return false
	}
	if carrierSince.IsZero() {
		*carrierSince = now
	}
	return now.Sub(*carrierSince) >= lowerUpSettle
}

// waitCarrier polls until at least one link is ready (linkReady), then
// gives the others a short grace period, and returns those ready.
func waitCarrier(ctx context.Context, links []netlink.Link, timeout time.Duration) []netlink.Link {
	deadline := time.Now().Add(timeout)
	var grace time.Time
	since := make([]time.Time, len(links))
	for {
		var up []netlink.Link
		now := time.Now()
		for i, l := range links {
			cur, err := netlink.LinkByIndex(l.Attrs().Index)
			if err != nil {
				continue
			}
			if linkReady(cur.Attrs().RawFlags, now, &since[i]) {
				up = append(up, cur)
			}
		}
		if len(up) == len(links) || now.After(deadline) || (!grace.IsZero() && now.After(grace)) {
			return up
		}
		if len(up) > 0 && grace.IsZero() {
			grace = now.Add(time.Second)
		}
		select {
		case <-ctx.Done():
			return up
		case <-time.After(10 * time.Millisecond):
		}
	}
}
