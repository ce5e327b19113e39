// Package swtpmtest runs a real software TPM (swtpm, TPM 2.0) for tests:
// a process per TPM, its state in a directory the test owns (same
// directory = same endorsement seed = same EK across restarts), commands on
// a Unix socket. Tests skip, saying why, where swtpm is not installed.
package swtpmtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/tpm/attest"
	"github.com/cure-oss/cure/tools/tpm/eventlog"
	"github.com/google/go-tpm/tpm2/transport"
)

// TPM is one running swtpm.
type TPM struct {
	t    testing.TB
	Dir  string // state directory
	Sock string // command socket
	cmd  *exec.Cmd
	conn transport.TPMCloser
}

// Start starts a swtpm with its state in dir ("" for a fresh temp dir).
func Start(t testing.TB, dir string) *TPM {
	t.Helper()
	if _, err := exec.LookPath("swtpm"); err != nil {
		t.Skip("swtpm is not installed (Debian: apt-get install swtpm swtpm-tools)")
	}
	if dir == "" {
		dir = t.TempDir()
	}
	s := &TPM{t: t, Dir: dir}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

func (s *TPM) start() {
	s.t.Helper()
	// A short socket path: sun_path holds 108 bytes, test temp dirs are long.
	sockDir, err := os.MkdirTemp("", "swtpm")
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { os.RemoveAll(sockDir) })
	s.Sock = filepath.Join(sockDir, "s")
	// startup-clear: the TPM comes up as after a platform reset (PCRs at
	// their reset values), as firmware would leave it before measuring.
	s.cmd = exec.Command("swtpm", "socket", "--tpm2", "--tpmstate", "dir="+s.Dir,
		"--server", "type=unixio,path="+s.Sock, "--ctrl", "type=unixio,path="+filepath.Join(sockDir, "c"),
		"--flags", "not-need-init,startup-clear")
	out, err := os.Create(filepath.Join(sockDir, "log"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start swtpm: %v", err)
	}
	// The socket file appears at bind(), a moment before listen(): ready
	// is when a connection is taken. That connection is the one Open
	// returns (swtpm serves one client at a time).
	var last error
	for i := 0; i < 500; i++ {
		c, err := attest.DialSocket("unix", s.Sock, time.Second)
		if err == nil {
			s.conn = c
			return
		}
		last = err
		time.Sleep(10 * time.Millisecond)
	}
	s.t.Fatalf("swtpm did not take a connection on %s: %v", s.Sock, last)
}

// Open is the connection to the running TPM: one, shared, since swtpm
// serves one client at a time (as the kernel's /dev/tpm0 does).
func (s *TPM) Open() transport.TPM {
	s.t.Helper()
	if s.conn == nil {
		c, err := attest.DialSocket("unix", s.Sock, 5*time.Second)
		if err != nil {
			s.t.Fatal(err)
		}
		s.conn = c
	}
	return s.conn
}

// Restart stops the process and starts it again on the same state: a
// reboot of the node (same EK, PCRs reset).
func (s *TPM) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Stop ends the process.
func (s *TPM) Stop() {
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// String names the TPM in test logs.
func (s *TPM) String() string { return fmt.Sprintf("swtpm(%s)", s.Dir) }

// Boot plays a firmware's measurements into the TPM and its event log:
// each event is logged and extended into its PCR, so the log replays to
// the TPM's PCRs as on a real machine.
type Boot struct {
	Log *eventlog.Writer
	tpm transport.TPM
	t   testing.TB
}

// Measure starts a boot's measurements on the TPM (just started or restarted).
func (s *TPM) Measure() *Boot {
	return &Boot{Log: eventlog.NewWriter(), tpm: s.Open(), t: s.t}
}

// Event logs and extends sha256(data) into pcr.
func (b *Boot) Event(pcr, typ uint32, data []byte) {
	b.t.Helper()
	if err := attest.Extend(b.tpm, pcr, b.Log.Event(pcr, typ, data)); err != nil {
		b.t.Fatal(err)
	}
}

// Digest logs and extends a given digest (a boot application's
// Authenticode hash) into pcr.
func (b *Boot) Digest(pcr, typ uint32, digest, data []byte) {
	b.t.Helper()
	b.Log.Digest(pcr, typ, digest, data)
	if err := attest.Extend(b.tpm, pcr, digest); err != nil {
		b.t.Fatal(err)
	}
}

// Firmware measures a plausible UEFI boot, in the order OVMF measures
// one (provisioner-lite/attestation/testdata): firmware version and blobs
// in PCR 0 (fw names the firmware), option ROMs in 2, Secure Boot state in
// 7, the boot manager's "Calling EFI Application from Boot Option" in 4,
// separators in 0-7, the boot application's Authenticode hash in 4, and
// ExitBootServices in 5 (bootApp nil: the boot stops before an application).
func (b *Boot) Firmware(fw string, bootApp []byte) {
	b.t.Helper()
	if bootApp == nil {
		b.Apps(fw)
		return
	}
	b.Apps(fw, bootApp)
}

// Apps is Firmware starting each of apps in turn (Authenticode hashes, in
// order) before ExitBootServices: a boot whose path another application
// joined.
func (b *Boot) Apps(fw string, apps ...[]byte) {
	b.t.Helper()
	b.Retried(fw, 0, apps...)
}

// Retried is Apps after retries boot attempts that loaded nothing (the
// firmware's "Returning from" and "Calling EFI Application" actions again
// in PCR 4): a boot path that passes, with another PCR 4 value.
func (b *Boot) Retried(fw string, retries int, apps ...[]byte) {
	b.t.Helper()
	b.Event(0, eventlog.EVSCRTMVersion, []byte(fw))
	b.Event(0, eventlog.EVEFIPlatformFirmwareBlob, []byte("firmware volume of "+fw))
	b.Event(1, eventlog.EVEFIHandoffTables, []byte("smbios"))
	b.Event(2, eventlog.EVEFIBootServicesDriver, []byte("nic option rom"))
	b.Event(7, eventlog.EVEFIVariableDriverConfig, []byte("SecureBoot=1"))
	b.Event(4, eventlog.EVEFIAction, []byte("Calling EFI Application from Boot Option"))
	for pcr := uint32(0); pcr <= 7; pcr++ {
		b.Event(pcr, eventlog.EVSeparator, []byte{0, 0, 0, 0})
	}
	for range retries {
		b.Event(4, eventlog.EVEFIAction, []byte("Returning from EFI Application from Boot Option"))
		b.Event(4, eventlog.EVEFIAction, []byte("Calling EFI Application from Boot Option"))
	}
	for _, app := range apps {
		b.Digest(4, eventlog.EVEFIBootServicesApplication, app, []byte("\\EFI\\BOOT\\BOOTX64.EFI"))
	}
	if len(apps) > 0 {
		b.Event(5, eventlog.EVEFIAction, []byte("Exit Boot Services Invocation"))
		b.Event(5, eventlog.EVEFIAction, []byte("Exit Boot Services Returned with Success"))
	}
}
