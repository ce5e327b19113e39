package main

import (
	"flag"
	"fmt"

	"github.com/cure-oss/cure/provisioner-lite/coordinator"
	"github.com/cure-oss/cure/provisioner-lite/enlist"
)

// registerEnlistFlags: enlistment (docs/SECURITY.md "Enlistment", docs/SITE.md).
func registerEnlistFlags(fs *flag.FlagSet, e *coordinator.EnlistConfig) {
	fs.BoolVar(&e.On, "enlist", e.On, "a machine whose MAC is in no node's inventory that network-boots gets CURE in inspect mode (never writes) "+
		"and reports what it is as a discovered machine (curectl nodes discovered, nodes approve); it gets no secret and no run "+
		"(off: unknown MACs are refused; on, proxy DHCP answers them)")
	fs.IntVar(&e.Max, "enlist-max", e.Max, fmt.Sprintf("discovered machines kept that are not approved yet: past it an unknown MAC's boot is refused (0: %d)", enlist.DefaultMax))
}
