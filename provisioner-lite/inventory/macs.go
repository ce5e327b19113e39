package inventory

import (
	"slices"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// UnlistedNICs returns the MACs of the NICs inv reports when none of them
// is among macs (a node's inventory entry), else nil (one matches, or no NIC
// was reported). A node whose entry names none of its NICs is not
// recognised when it network-boots: its runs wait for CURE in vain.
func UnlistedNICs(macs []string, inv *curev1.Inventory) []string {
	var reported []string
	for _, n := range inv.GetNics() {
		if m := normMAC(n.GetMac()); m != "" && m != "00:00:00:00:00:00" {
			reported = append(reported, m)
		}
	}
	if len(reported) == 0 {
		return nil
	}
	for _, m := range macs {
		if slices.Contains(reported, normMAC(m)) {
			return nil
		}
	}
	return reported
}

func normMAC(m string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(m)), "-", ":")
}
