package opal

import (
	"errors"
	"fmt"

	"github.com/cure-oss/cure/tools/nvme"
)

// NVMeTransport tunnels security protocols through NVMe Security
// Send/Receive admin commands on a controller. TCG is controller-wide, so
// NSID is normally 0.
type NVMeTransport struct {
	Admin nvme.Admin
	NSID  uint32
}

var _ SecurityTransport = NVMeTransport{}

// SecurityReceive implements SecurityTransport.
func (t NVMeTransport) SecurityReceive(protocol uint8, sp uint16, buf []byte) error {
	return nvmeErr(nvme.SecurityReceive(t.Admin, t.NSID, protocol, sp, buf))
}

// SecuritySend implements SecurityTransport.
func (t NVMeTransport) SecuritySend(protocol uint8, sp uint16, buf []byte) error {
	return nvmeErr(nvme.SecuritySend(t.Admin, t.NSID, protocol, sp, buf))
}

// nvmeErr marks "the controller has no security commands" as ErrNoTCG
// while keeping the NVMe status in the chain.
func nvmeErr(err error) error {
	var st *nvme.StatusError
	if errors.As(err, &st) && st.InvalidOpcode() {
		return fmt.Errorf("%w: %w", ErrNoTCG, err)
	}
	return err
}
