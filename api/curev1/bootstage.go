package curev1

// Boot stage names (Hello.boot_stages), in the order a boot reaches them.
// The runner marks them; the coordinator accepts only these names.
const (
	BootStageInitramfsUnpackStart = "initramfs_unpack_start" // kernel: "Trying to unpack rootfs image as initramfs"
	BootStageInitramfsUnpacked    = "initramfs_unpacked"     // kernel: "Freeing initrd memory"
	BootStageInitStarted          = "init_started"           // kernel: "Run /init as init process"
	BootStageRunnerStarted        = "runner_started"         // the runner's main(), after u-root's init and Go's start
	BootStageModulesLoaded        = "modules_loaded"         // drivers for the devices present
	BootStageLinkUp               = "link_up"                // a NIC reports carrier
	BootStageDHCPBound            = "dhcp_bound"             // lease configured
	BootStageInventoryDone        = "inventory_done"
	BootStageConnected            = "connected"  // TCP + TLS handshake with the coordinator done
	BootStageHelloSent            = "hello_sent" // registered, as the coordinator sees it
)

// BootStageNames lists the boot stages in boot order.
var BootStageNames = []string{
	BootStageInitramfsUnpackStart, BootStageInitramfsUnpacked, BootStageInitStarted, BootStageRunnerStarted,
	BootStageModulesLoaded, BootStageLinkUp, BootStageDHCPBound, BootStageInventoryDone, BootStageConnected,
	BootStageHelloSent,
}
