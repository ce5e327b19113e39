package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/inventory"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// pairOffer checks the addresses a runner offers for the node-pair
// burn-in (PairReady): its partners will be sent to test against them,
// so each must be the node's own: the address its session comes from, or
// one its boot's stored inventory lists on the session's network. An
// offer that names any other (the coordinator, a BMC, another node's test
// server) is refused: a security event, and the stored offer carries the
// refusal (PairReady.refused, which only this sets), so the pipeline
// judges the node's check its own ERROR and plans its batch without it.
func (s *RunnerService) pairOffer(ctx context.Context, sess *sessions.Session, peerIP string, ev *curev1.Event, log *slog.Logger) {
	pr := ev.GetPairReady()
	if pr == nil {
		return
	}
	pr.Refused = "" // the coordinator's to say, never the runner's
	var inv *curev1.Inventory
	if rec, err := s.Store.RunInventory(ctx, sess.RunID); err == nil && rec.BootID == sess.BootID {
		inv, _ = inventory.Unmarshal(rec.JSON)
	}
	why := pairAddressProblem(pr.GetPorts(), peerIP, inv)
	if why == "" {
		return
	}
	pr.Refused = textsafe.Bounded(why, maxValue)
	log.Warn("node-pair offer refused", "check", textsafe.BoundedLine(pr.GetCheck(), maxName), "why", pr.Refused)
	s.security(ctx, audit.PairAddress, sess, peerIP, fmt.Sprintf("node-pair %s: offer refused: %s", textsafe.BoundedLine(pr.GetCheck(), maxName), pr.Refused))
}

// pairAddressProblem says which offered addresses are not the node's own
// ("" when all are): own is the session's address, or one the boot's
// inventory lists (with its prefix) inside the network the inventory
// gives the session's address. Without an inventory that lists the
// session's address, only that address is the node's.
func pairAddressProblem(ports []*curev1.PairPort, peerIP string, inv *curev1.Inventory) string {
	peer := net.ParseIP(peerIP)
	if peer == nil {
		return fmt.Sprintf("the session's address %q is not an IP address, so no offered address can be shown to be the node's", peerIP)
	}
	var session *net.IPNet
	var listed []net.IP
	for _, n := range inv.GetNics() {
		for _, a := range n.GetAddresses() {
			ip, ipn, err := net.ParseCIDR(a)
			if err != nil {
				continue // without its prefix an address says nothing of its network
			}
			listed = append(listed, ip)
			if ip.Equal(peer) {
				session = ipn
			}
		}
	}
	var problems []string
	for _, p := range ports {
		ip := net.ParseIP(p.GetAddress())
		if ip == nil {
			continue // refused as malformed when the event is cleaned
		}
		where := fmt.Sprintf("port %q address %s", textsafe.BoundedLine(p.GetName(), maxName), ip)
		switch {
		case ip.IsUnspecified() || ip.IsMulticast():
			problems = append(problems, where+" is not one host's address")
		case ip.Equal(peer):
		case session == nil:
			problems = append(problems, fmt.Sprintf("%s is not the session's address %s, and the boot's inventory does not list %s with its network", where, peer, peer))
		case !session.Contains(ip):
			problems = append(problems, fmt.Sprintf("%s is outside the session's network %s", where, session))
		case !containsIP(listed, ip):
			problems = append(problems, fmt.Sprintf("%s is not the session's address %s and the boot's inventory does not list it", where, peer))
		}
	}
	if len(problems) == 0 {
		return ""
	}
	return strings.Join(problems, "; ") + ": the node's partners would test against an address that is not its own"
}

func containsIP(ips []net.IP, ip net.IP) bool {
	for _, x := range ips {
		if x.Equal(ip) {
			return true
		}
	}
	return false
}
