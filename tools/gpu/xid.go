package gpu

// XidClass is how an Xid bears on a node's acceptance.
type XidClass int

const (
	// XidUnknown: not in the table. Reported, not failed, unless the
	// expectations list it in CriticalXids.
	XidUnknown XidClass = iota
	// XidApplication: NVIDIA attributes it to the application or driver
	// state first (e.g. 13, 31, 43). Reported, not failed.
	XidApplication
	// XidInformational: a recovery event the hardware handled (e.g. 63, a
	// row remap recorded). Reported; the matching counter check decides.
	XidInformational
	// XidCritical: hardware or firmware failure; the GPU fails the run.
	XidCritical
)

func (c XidClass) String() string {
	switch c {
	case XidApplication:
		return "application"
	case XidInformational:
		return "informational"
	case XidCritical:
		return "critical"
	case XidUnknown:
	}
	return "unknown"
}

// XidInfo is one row of the table.
type XidInfo struct {
	Class XidClass
	Name  string
}

// xidTable follows NVIDIA's "Xid Errors" catalog
// (https://docs.nvidia.com/deploy/xid-errors/, the per-Xid "Possible causes"
// and "Resolution" columns) and the memory-error documents it links:
// "Dynamic Page Retirement" (Xid 48/63/64 on pre-Ampere) and "NVIDIA A100/H100
// GPU Memory Error Management" (Xid 63/64 as row-remapping events, 94/95
// contained/uncontained ECC). An Xid is critical here when the catalog's
// resolution is a GPU reset, node reboot or RMA for a hardware cause; it is
// "application" when the catalog lists a user application as the first cause.
var xidTable = map[uint64]XidInfo{
	8:   {XidApplication, "GPU stopped processing (timeout)"},
	13:  {XidApplication, "graphics engine exception"},
	31:  {XidApplication, "GPU memory page fault"},
	32:  {XidCritical, "invalid or corrupted push buffer stream (PCIe/bus)"},
	38:  {XidCritical, "driver firmware error"},
	43:  {XidApplication, "GPU stopped processing"},
	45:  {XidApplication, "preemptive cleanup, due to previous errors"},
	48:  {XidCritical, "double-bit ECC error (DBE)"},
	56:  {XidCritical, "display engine error"},
	57:  {XidCritical, "error programming video memory interface"},
	58:  {XidCritical, "unstable video memory interface detected"},
	61:  {XidCritical, "internal micro-controller breakpoint/warning"},
	62:  {XidCritical, "internal micro-controller halt"},
	63:  {XidInformational, "ECC page retirement or row remapping recording event"},
	64:  {XidCritical, "ECC page retirement or row remapper recording failure"},
	68:  {XidCritical, "video processor exception"},
	69:  {XidCritical, "graphics engine class error"},
	74:  {XidCritical, "NVLink error"},
	79:  {XidCritical, "GPU has fallen off the bus"},
	92:  {XidCritical, "high single-bit ECC error rate"},
	94:  {XidInformational, "contained ECC error (application terminated, GPU reset needed to clear)"},
	95:  {XidCritical, "uncontained ECC error"},
	109: {XidApplication, "context switch timeout"},
	119: {XidCritical, "GSP RPC timeout"},
	120: {XidCritical, "GSP error"},
	121: {XidCritical, "C2C link corrected error / degradation"},
	140: {XidCritical, "unrecovered ECC error"},
	143: {XidCritical, "GPU initialization failure"},
	144: {XidCritical, "NVLink SAW error"},
	145: {XidCritical, "NVLink RLW error"},
	146: {XidCritical, "NVLink TLW error"},
	147: {XidCritical, "NVLink TREX error"},
	148: {XidCritical, "NVLink NVLPW_CTRL error"},
	149: {XidCritical, "NVLink NETIR error"},
	150: {XidCritical, "NVLink MSE error"},
	154: {XidCritical, "GPU recovery action changed (reset or reboot required)"},
}

// LookupXid classifies an Xid.
func LookupXid(xid uint64) XidInfo {
	if info, ok := xidTable[xid]; ok {
		return info
	}
	return XidInfo{Class: XidUnknown, Name: "not in CURE's Xid table"}
}
