package curev1

// Boot stage names (Hello.boot_stages), in the order a boot reaches them.
// The runner marks them; the coordinator accepts only these names.
const (
	BootStageInitramfsUnpackStart = "initramfs_unpack_start" // kernel: "Trying to unpack rootfs image as initramfs"
	BootStageInitramfsUnpacked    = "initramfs_unpacked"     // kernel: "Freeing initrd memory"
	BootStageInitStarted          = "init_started"           // kernel: "Run /init as init process"
	BootStageRunnerStarted        = "runner_started"         // the runner's main(), after u-root's init and Go's start
	BootStageNetDriversLoaded     = "net_drivers_loaded"     // drivers for the network devices present
	BootStageModulesLoaded        = "modules_loaded"         // drivers for all the devices present
	BootStageLinkUp               = "link_up"                // a NIC reports carrier
	BootStageDHCPBound            = "dhcp_bound"             // lease configured
	BootStageInventoryDone        = "inventory_done"
	BootStageConnected            = "connected"  // TCP + TLS handshake with the coordinator done
	BootStageHelloSent            = "hello_sent" // registered, as the coordinator sees it
)

// BootStageNames lists the boot stages in the order a boot usually reaches
// them. Some run side by side (storage drivers load during DHCP, the TLS
// handshake runs beside the inventory), so a boot may reach them in another
// order: reports sort by time.
var BootStageNames = []string{
	BootStageInitramfsUnpackStart, BootStageInitramfsUnpacked, BootStageInitStarted, BootStageRunnerStarted,
	BootStageNetDriversLoaded, BootStageLinkUp, BootStageDHCPBound, BootStageModulesLoaded, BootStageConnected,
	BootStageInventoryDone, BootStageHelloSent,
}
