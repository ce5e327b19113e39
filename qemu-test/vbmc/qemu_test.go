package vbmc

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestQEMUArgs(t *testing.T) {
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(disk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	q := &QEMUMachine{cfg: QEMUConfig{
		Name: "n1", MAC: "52:54:00:00:00:01", Serial: "SN,1", UUID: "11111111-2222-3333-4444-555555555555",
		DiskPath: disk, MemoryMiB: 768, CPUs: 2, ConsoleLog: filepath.Join(dir, "con.log"),
		BootURL: "http://10.0.2.2:8080/boot.ipxe", RebootTimeout: 3 * time.Second,
	}}
	args, err := q.Args(BootPxe, "/tmp/q.sock")
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	for _, want := range []string{
		"-accel tcg", "-machine q35", "-m 768", "-no-user-config -nodefaults",
		"-chardev file,id=con0,path=" + filepath.Join(dir, "con.log") + ",append=on",
		"-qmp unix:/tmp/q.sock,server=on,wait=off",
		"-netdev user,id=n0,bootfile=http://10.0.2.2:8080/boot.ipxe",
		"-device virtio-net-pci,netdev=n0,mac=52:54:00:00:00:01,speed=25000,duplex=full",
		"-smbios type=17,loc_pfx=DIMM",
		"format=raw,cache=writeback", "-device nvme,serial=SN,,1,drive=d0",
		"uuid=11111111-2222-3333-4444-555555555555",
		"-boot order=n,reboot-timeout=3000", "-action reboot=shutdown", "-no-shutdown",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("args lack %q:\n%s", want, line)
		}
	}
	args, _ = q.Args(BootHdd, "/tmp/q.sock")
	if !slices.Contains(args, "order=c,reboot-timeout=3000") {
		t.Errorf("Hdd boot: want order=c, got %v", args)
	}
	if _, err := q.Args("Cd", "/tmp/q.sock"); err == nil {
		t.Error("Args accepted boot device Cd")
	}
	if strings.Contains(line, "throttling.") {
		t.Errorf("an unthrottled disk is throttled:\n%s", line)
	}
	q.cfg.DiskThrottle = DiskThrottle{BPS: 2 << 20, IOPS: 50}
	args, _ = q.Args(BootPxe, "/tmp/q.sock")
	if want := "-set drive.d0.throttling.bps-total=2097152 -set drive.d0.throttling.iops-total=50"; !strings.Contains(strings.Join(args, " "), want) {
		t.Errorf("throttled disk: args lack %q:\n%s", want, strings.Join(args, " "))
	}
	// A slot limited to gen1 x1: the NVMe controller sits behind its own
	// root port with that link capability.
	q.cfg.DiskPort = &RootPort{Speed: "2_5", Width: 1}
	args, _ = q.Args(BootPxe, "/tmp/q.sock")
	line = strings.Join(args, " ")
	if !strings.Contains(line, "-device pcie-root-port,id=rp0,chassis=1,x-speed=2_5,x-width=1") ||
		!strings.Contains(line, "-device nvme,serial=SN,,1,drive=d0,bus=rp0") ||
		strings.Index(line, "pcie-root-port") > strings.Index(line, "-device nvme") {
		t.Errorf("DiskPort: want the root port, then the NVMe on it:\n%s", line)
	}
}

// UEFI mode: OVMF's code and this machine's own variable store, no option
// ROM on the NIC (OVMF's own PXE), the boot device by bootindex; a tap
// device instead of the user network.
func TestQEMUArgsUEFI(t *testing.T) {
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(disk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	q := &QEMUMachine{cfg: QEMUConfig{
		Name: "n1", MAC: "52:54:00:00:00:01", DiskPath: disk, MemoryMiB: 768, CPUs: 2, ConsoleLog: filepath.Join(dir, "con.log"),
		Tap: "tap0", OVMFCode: "/usr/share/OVMF/OVMF_CODE.fd", OVMFVars: "/usr/share/OVMF/OVMF_VARS.fd", RunDir: dir,
	}}
	if err := q.SetBootMode(ModeUEFI); err != nil {
		t.Fatal(err)
	}
	args, err := q.Args(BootPxe, "/tmp/q.sock")
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	for _, want := range []string{
		"-drive if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE.fd",
		"-drive if=pflash,format=raw,unit=1,file=" + filepath.Join(dir, "OVMF_VARS.fd"),
		"-netdev tap,id=n0,ifname=tap0,script=no,downscript=no",
		"-device virtio-net-pci,netdev=n0,mac=52:54:00:00:00:01,speed=25000,duplex=full,addr=0x1,romfile=,bootindex=1",
		"-device nvme,serial=n1,drive=d0 ",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("UEFI PXE args lack %q:\n%s", want, line)
		}
	}
	args, _ = q.Args(BootHdd, "/tmp/q.sock")
	line = strings.Join(args, " ")
	if !strings.Contains(line, "nvme,serial=n1,drive=d0,bootindex=1") || strings.Contains(line, "romfile=,bootindex") {
		t.Errorf("UEFI disk boot: want the NVMe first:\n%s", line)
	}
	// Back to Legacy: SeaBIOS with QEMU's iPXE ROM, no pflash.
	if err := q.SetBootMode(ModeLegacy); err != nil {
		t.Fatal(err)
	}
	args, _ = q.Args(BootPxe, "/tmp/q.sock")
	line = strings.Join(args, " ")
	if strings.Contains(line, "pflash") || strings.Contains(line, "romfile=") || strings.Contains(line, "bootindex") {
		t.Errorf("Legacy args carry UEFI settings:\n%s", line)
	}
	noOVMF := &QEMUMachine{cfg: QEMUConfig{Name: "n2"}}
	if err := noOVMF.SetBootMode(ModeUEFI); err == nil || !strings.Contains(err.Error(), "OVMF") {
		t.Errorf("UEFI without OVMF: %v", err)
	}
	if err := q.SetBootMode("BIOS"); err == nil {
		t.Error("mode BIOS accepted")
	}
}

func TestNewQEMUMachineRejectsBadConfig(t *testing.T) {
	base := QEMUConfig{Name: "n", MAC: "52:54:00:00:00:01", ConsoleLog: "/tmp/x.log", Binary: "true"}
	cases := map[string]func(*QEMUConfig){
		"MAC":          func(c *QEMUConfig) { c.MAC = "52-54-00" },
		"UUID":         func(c *QEMUConfig) { c.UUID = "nope" },
		"DiskPath":     func(c *QEMUConfig) { c.DiskPath = "/nonexistent/disk.img" },
		"BootURL":      func(c *QEMUConfig) { c.BootURL = "ftp://x/y" },
		"Name":         func(c *QEMUConfig) { c.Name = "" },
		"Tap":          func(c *QEMUConfig) { c.Tap = "tap0"; c.BootURL = "http://10.0.2.2/boot.ipxe" },
		"OVMFCode":     func(c *QEMUConfig) { c.OVMFCode = "/usr/share/OVMF/OVMF_CODE.fd" },
		"OVMF":         func(c *QEMUConfig) { c.OVMFCode, c.OVMFVars = "/nonexistent/CODE.fd", "/nonexistent/VARS.fd" },
		"DiskPort":     func(c *QEMUConfig) { c.DiskPort = &RootPort{Speed: "2.5", Width: 1} },
		"DiskThrottle": func(c *QEMUConfig) { c.DiskThrottle.BPS = -1 },
	}
	for field, mut := range cases {
		c := base
		mut(&c)
		_, err := NewQEMUMachine(c)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: want an error naming %s, got %v", field, field, err)
		}
	}
}

// guestELF builds a tiny 32-bit ELF that iPXE can boot: it prints msg on
// COM1 and then powers the q35 machine off through ACPI (PM1a_CNT at 0x604,
// SLP_EN with QEMU's S5 type 0) or resets it through the reset control
// register (0xCF9). It stands in for a kernel, so the test needs none.
func guestELF(msg string, reset bool) []byte {
	const base = 0x100000
	const hdr = 52 + 32
	code := []byte{
		0xBE, 0, 0, 0, 0, // mov esi, msg
		0x66, 0xBA, 0xF8, 0x03, // mov dx, 0x3f8
		0xAC,       // lodsb
		0x84, 0xC0, // test al, al
		0x74, 0x03, // jz +3
		0xEE,       // out dx, al
		0xEB, 0xF8, // jmp lodsb
	}
	if reset {
		code = append(code, 0x66, 0xBA, 0xF9, 0x0C, // mov dx, 0xcf9
			0xB0, 0x06, 0xEE, 0x90, 0x90, 0x90) // mov al, 6; out dx, al
	} else {
		code = append(code, 0x66, 0xBA, 0x04, 0x06, // mov dx, 0x604
			0x66, 0xB8, 0x00, 0x20, 0x66, 0xEF) // mov ax, 0x2000; out dx, ax
	}
	code = append(code, 0xF4, 0xEB, 0xFD) // hlt; jmp hlt
	binary.LittleEndian.PutUint32(code[1:], uint32(base+hdr+len(code)))
	code = append(code, []byte(msg+"\r\n\x00")...)

	f := make([]byte, hdr, hdr+len(code))
	copy(f, "\x7fELF\x01\x01\x01")
	le := binary.LittleEndian
	le.PutUint16(f[16:], 2)        // ET_EXEC
	le.PutUint16(f[18:], 3)        // EM_386
	le.PutUint32(f[20:], 1)        // EV_CURRENT
	le.PutUint32(f[24:], base+hdr) // entry
	le.PutUint32(f[28:], 52)       // phoff
	le.PutUint16(f[40:], 52)       // ehsize
	le.PutUint16(f[42:], 32)       // phentsize
	le.PutUint16(f[44:], 1)        // phnum
	ph := f[52:]
	le.PutUint32(ph[0:], 1)                      // PT_LOAD
	le.PutUint32(ph[4:], 0)                      // offset
	le.PutUint32(ph[8:], base)                   // vaddr
	le.PutUint32(ph[12:], base)                  // paddr
	le.PutUint32(ph[16:], uint32(hdr+len(code))) // filesz
	le.PutUint32(ph[20:], uint32(hdr+len(code))) // memsz
	le.PutUint32(ph[24:], 7)                     // RWX
	le.PutUint32(ph[28:], 0x1000)                // align
	return append(f, code...)
}

// bootServer plays the coordinator's boot server on 127.0.0.1 (the guest
// reaches it as 10.0.2.2): /boot.ipxe chains the per-MAC script, which runs
// the next guest program in line.
type bootServer struct {
	*httptest.Server
	mu       sync.Mutex
	paths    []string
	programs []string // "poweroff", "reset" or "hang", one per per-MAC request
	quit     chan struct{}
}

func newBootServer(t *testing.T, programs ...string) *bootServer {
	bs := &bootServer{programs: programs, quit: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	base := fmt.Sprintf("http://10.0.2.2:%d", port)
	bs.Server = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bs.mu.Lock()
		bs.paths = append(bs.paths, r.URL.Path)
		bs.mu.Unlock()
		switch {
		case r.URL.Path == "/boot.ipxe":
			fmt.Fprintf(w, "#!ipxe\nchain %s/ipxe/${mac:hexhyp}\n", base)
		case strings.HasPrefix(r.URL.Path, "/ipxe/"):
			bs.mu.Lock()
			prog := "poweroff"
			if len(bs.programs) > 0 {
				prog, bs.programs = bs.programs[0], bs.programs[1:]
			}
			bs.mu.Unlock()
			if prog == "hang" { // a guest busy in firmware: ignores ACPI
				select {
				case <-r.Context().Done():
				case <-bs.quit:
				}
				return
			}
			fmt.Fprintf(w, "#!ipxe\necho CURE-IPXE-OK\nchain %s/guest/%s.elf\n", base, prog)
		case r.URL.Path == "/guest/poweroff.elf":
			w.Write(guestELF("CURE-GUEST-POWEROFF", false))
		case r.URL.Path == "/guest/reset.elf":
			w.Write(guestELF("CURE-GUEST-RESET", true))
		default:
			http.NotFound(w, r)
		}
	})}}
	bs.Start()
	t.Cleanup(func() { close(bs.quit); bs.Close() })
	return bs
}

func (bs *bootServer) Paths() []string {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return slices.Clone(bs.paths)
}

func needQEMU(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots QEMU; skipped with -short")
	}
	if os.Getenv("CURE_OUT") == "" {
		t.Skip("boots QEMU; set CURE_OUT to run (CI's QEMU stage)")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 not installed")
	}
}

func newQEMUNode(t *testing.T, bs *bootServer, graceful ...time.Duration) (*BMC, *QEMUMachine, string) {
	t.Helper()
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(disk, make([]byte, 8<<20), 0o644); err != nil { // empty disk
		t.Fatal(err)
	}
	console := filepath.Join(dir, "console.log")
	m, err := NewQEMUMachine(QEMUConfig{
		Name: "qn1", MAC: "52:54:00:c0:ff:ee", Serial: "QSN1", UUID: "8f4a1c2e-0000-4000-8000-000000000001",
		DiskPath: disk, MemoryMiB: 256, ConsoleLog: console,
		BootURL: strings.Replace(bs.URL, "127.0.0.1", "10.0.2.2", 1) + "/boot.ipxe",
		Logger:  testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(graceful) > 0 {
		m.cfg.GracefulTimeout = graceful[0]
	}
	b, err := New(Config{Name: "qn1", MAC: "52:54:00:c0:ff:ee", Logger: testLogger(t)}, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b.Close(ctx)
		m.Close(ctx)
	})
	return b, m, console
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func setOverride(t *testing.T, b *BMC, target, enabled string) {
	t.Helper()
	rec := do(t, b, "PATCH", "/redfish/v1/Systems/437XR1138R2", "",
		fmt.Sprintf(`{"Boot":{"BootSourceOverrideTarget":%q,"BootSourceOverrideEnabled":%q}}`, target, enabled))
	if rec.Code != http.StatusOK {
		t.Fatalf("PATCH override: %d %s", rec.Code, rec.Body)
	}
}

func TestQEMUPxeBootPowersOff(t *testing.T) {
	needQEMU(t)
	bs := newBootServer(t, "poweroff")
	b, _, console := newQEMUNode(t, bs)
	setOverride(t, b, "Pxe", "Once")
	if rec := do(t, b, "POST", "/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset", "", `{"ResetType":"On"}`); rec.Code != http.StatusNoContent {
		t.Fatalf("power on: %d %s", rec.Code, rec.Body)
	}
	waitFor(t, 3*time.Minute, "guest poweroff", func() bool { return b.PowerState() == PowerOff })

	paths := bs.Paths()
	if !slices.Contains(paths, "/boot.ipxe") || !slices.Contains(paths, "/ipxe/52-54-00-c0-ff-ee") {
		t.Errorf("boot server requests = %v, want /boot.ipxe then /ipxe/52-54-00-c0-ff-ee", paths)
	}
	h := b.History()
	if len(h) != 1 || h[0].Device != BootPxe || h[0].Override != "Once" {
		t.Errorf("history = %+v, want one Pxe boot chosen by Once", h)
	}
	if _, en := b.BootOverride(); en != "Disabled" {
		t.Errorf("after the boot, Enabled = %s, want Disabled (Once consumed)", en)
	}
	out, _ := os.ReadFile(console)
	for _, want := range []string{"CURE-IPXE-OK", "CURE-GUEST-POWEROFF"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("console lacks %q:\n%s", want, out)
		}
	}
}

// A Once PXE boot whose guest reboots: the BMC boots again from the default
// order (disk first); the empty disk fails and the firmware falls through to
// the network, where the coordinator powers it off.
func TestQEMUOnceConsumedThenEmptyDisk(t *testing.T) {
	needQEMU(t)
	bs := newBootServer(t, "reset", "poweroff")
	b, _, console := newQEMUNode(t, bs)
	setOverride(t, b, "Pxe", "Once")
	if rec := do(t, b, "POST", "/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset", "", `{"ResetType":"On"}`); rec.Code != http.StatusNoContent {
		t.Fatalf("power on: %d %s", rec.Code, rec.Body)
	}
	waitFor(t, 4*time.Minute, "second boot to power off", func() bool {
		return b.PowerState() == PowerOff && len(b.History()) == 2
	})
	h := b.History()
	want := []BootRecord{{Device: BootPxe, Override: "Once", Reason: "On"}, {Device: BootHdd, Override: "Disabled", Reason: "guest-reset"}}
	for i := range want {
		if h[i].Device != want[i].Device || h[i].Override != want[i].Override || h[i].Reason != want[i].Reason {
			t.Errorf("boot %d = %+v, want %+v", i, h[i], want[i])
		}
	}
	out, _ := os.ReadFile(console)
	s := string(out)
	reset, disk := strings.Index(s, "CURE-GUEST-RESET"), strings.LastIndex(s, "Booting from Hard Disk")
	if reset < 0 || disk < reset || !strings.Contains(s[disk:], "CURE-GUEST-POWEROFF") {
		t.Errorf("console does not show reset, then a disk boot attempt, then the poweroff:\n%s", s)
	}
}

// Power off from the BMC: graceful falls back to force when the guest
// ignores the ACPI button; ForceOff is immediate. Neither is taken for a
// guest poweroff or reboots the node.
func TestQEMUGracefulAndForceOff(t *testing.T) {
	needQEMU(t)
	bs := newBootServer(t, "hang", "hang")
	b, m, _ := newQEMUNode(t, bs, 2*time.Second)
	reset := func(rt string) {
		t.Helper()
		if rec := do(t, b, "POST", "/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset", "", `{"ResetType":"`+rt+`"}`); rec.Code != http.StatusNoContent {
			t.Fatalf("%s: %d %s", rt, rec.Code, rec.Body)
		}
	}
	inIPXE := func(n int) func() bool {
		return func() bool {
			c := 0
			for _, p := range bs.Paths() {
				if strings.HasPrefix(p, "/ipxe/") {
					c++
				}
			}
			return c >= n
		}
	}
	setOverride(t, b, "Pxe", "Continuous")
	reset("On")
	waitFor(t, 2*time.Minute, "iPXE to ask for its script", inIPXE(1))
	reset("GracefulShutdown")
	if b.PowerState() != PowerOn {
		t.Fatal("GracefulShutdown finished before the guest had a chance")
	}
	waitFor(t, 30*time.Second, "forced off after the grace period", func() bool { return b.PowerState() == PowerOff })
	if m.Running() {
		t.Fatal("QEMU still running after power off")
	}
	reset("On")
	waitFor(t, 2*time.Minute, "second boot in iPXE", inIPXE(2))
	start := time.Now()
	reset("ForceOff")
	if b.PowerState() != PowerOff || m.Running() || time.Since(start) > 10*time.Second {
		t.Fatalf("ForceOff: power %s running %v after %v", b.PowerState(), m.Running(), time.Since(start))
	}
	time.Sleep(time.Second) // a stray event would reboot it now
	if h := b.History(); len(h) != 2 || b.PowerState() != PowerOff {
		t.Fatalf("history %+v power %s: a host power-off must not count as a guest event", h, b.PowerState())
	}
}
