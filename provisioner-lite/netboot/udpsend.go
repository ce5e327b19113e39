package netboot

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// sendNoWait sends one IPv4 datagram without waiting for room in the
// socket's send buffer. Datagrams to an address nobody answers ARP for
// wait in the kernel, charged to the socket, until resolution fails
// (seconds): a flood from forged addresses on the segment fills the buffer
// that way, and a blocking send would then stall every answer behind it.
// A full buffer drops the datagram instead, as a lossy network would; the
// client retries. src, when set, is the source address (IP_PKTINFO), for
// sockets bound to 0.0.0.0.
func sendNoWait(conn *net.UDPConn, b []byte, to *net.UDPAddr, src net.IP) error {
	ip4 := to.IP.To4()
	if ip4 == nil {
		return fmt.Errorf("send to %v: not an IPv4 address", to)
	}
	sa := &unix.SockaddrInet4{Port: to.Port}
	copy(sa.Addr[:], ip4)
	var oob []byte
	if s4 := src.To4(); s4 != nil {
		var info unix.Inet4Pktinfo
		copy(info.Spec_dst[:], s4)
		oob = unix.PktInfo4(&info)
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("send to %v: %w", to, err)
	}
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), b, oob, sa, unix.MSG_DONTWAIT)
		return true // never wait for the socket to become writable
	}); err != nil {
		return fmt.Errorf("send to %v: %w", to, err)
	}
	if serr != nil {
		return fmt.Errorf("send to %v: %w", to, serr)
	}
	return nil
}
