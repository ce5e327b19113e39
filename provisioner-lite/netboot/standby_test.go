package netboot

import (
	"sync/atomic"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// An instance standing by (another holds the front door's lease) answers
// nothing; once it holds the lease it answers the same request.
func TestProxyDHCPStandby(t *testing.T) {
	var standby atomic.Bool
	standby.Store(true)
	p, _ := startProxy(t, Config{Inventory: inventoryOf(testMAC.String()), Standby: standby.Load})
	dhcpAddr, _ := p.Addrs()
	c := newClient(t)
	disc := ovmfDiscover(t)
	c.send(dhcpAddr, disc)
	if s := waitStats(t, p, func(s Stats) bool { return s.Ignored == 1 }); s.Answered != 0 {
		t.Fatalf("standby answered: %+v", s)
	}
	standby.Store(false)
	c.send(dhcpAddr, disc)
	if offer := c.recv(); offer.MessageType() != dhcpv4.MessageTypeOffer || offer.TransactionID != disc.TransactionID {
		t.Fatalf("holder's answer %v, want the OFFER", offer.MessageType())
	}
}
