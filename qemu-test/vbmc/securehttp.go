package vbmc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cure-oss/cure/tools/tpm/attest"
	"github.com/cure-oss/cure/tools/uefi"
	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
)

// UEFI HTTP boot, Secure Boot and the TPM of a QEMU machine: what a
// server's BMC and firmware do with HttpBootUri, db enrolment and a
// discrete TPM, done to OVMF and swtpm.

// HTTPBooter is a Machine that boots the URI the BMC was given
// (HttpBootUri) when the boot device is BootUefiHttp.
type HTTPBooter interface {
	SetHTTPBootURI(uri string) error
}

// nicSlot is the NIC's PCI slot (00:01.0), fixed so the boot option the
// BMC writes names it.
const nicSlot = 1

// httpBootOption is the Boot#### the virtual BMC writes for HttpBootUri,
// as EDK2's HTTP boot setup page makes one.
const httpBootOption = 0x0100

// vbmcOwner owns the signature-list entries the virtual BMC adds.
var vbmcOwner = uefi.MustGUID("c0de0001-0000-4000-8000-435552450001")

func (q *QEMUMachine) cacertsPath() string { return filepath.Join(q.cfg.RunDir, "https-cacerts.esl") }
func (q *QEMUMachine) tpmSock() string     { return filepath.Join(q.cfg.RunDir, "swtpm.sock") }
func (q *QEMUMachine) tpmDir() string      { return filepath.Join(q.cfg.RunDir, "tpm") }

// SetHTTPBootURI is the URI the next UefiHttp boot loads.
func (q *QEMUMachine) SetHTTPBootURI(uri string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.httpURI = uri
	return nil
}

// armHTTPBoot writes, for a UefiHttp boot, a boot option with the URI and
// BootNext pointing at it into the machine's variable store (QEMU is off):
// OVMF then boots it first, once, as a server's firmware does with the
// BMC's HttpBootUri.
func (q *QEMUMachine) armHTTPBoot(dev BootDevice) error {
	if dev != BootUefiHttp {
		return nil
	}
	if q.httpURI == "" {
		return fmt.Errorf("qemu node %s: UEFI HTTP boot without an HttpBootUri", q.cfg.Name)
	}
	b, err := os.ReadFile(q.varsPath())
	if err != nil {
		return err
	}
	vs, err := uefi.ParseVarStore(q.varsPath(), b)
	if err != nil {
		return fmt.Errorf("qemu node %s: %w", q.cfg.Name, err)
	}
	mac, err := net.ParseMAC(q.cfg.MAC)
	if err != nil {
		return err
	}
	dp := uefi.DevicePath(nil).PciRoot(0).Pci(nicSlot, 0).MAC(mac).IPv4DHCP().URI(q.httpURI)
	name := fmt.Sprintf("Boot%04X", httpBootOption)
	if err := vs.Set(name, uefi.GlobalVariable, uefi.AttrNVBSRT, uefi.LoadOption("UEFI HTTPv4 (BMC HttpBootUri)", dp)); err != nil {
		return fmt.Errorf("qemu node %s: %w", q.cfg.Name, err)
	}
	if err := vs.Set("BootNext", uefi.GlobalVariable, uefi.AttrNVBSRT, []byte{httpBootOption & 0xff, httpBootOption >> 8}); err != nil {
		return fmt.Errorf("qemu node %s: %w", q.cfg.Name, err)
	}
	return os.WriteFile(q.varsPath(), vs.Bytes(), 0o600)
}

// enrolDB adds certs to the db of a variable store template.
func enrolDB(name string, b []byte, certs [][]byte) ([]byte, error) {
	vs, err := uefi.ParseVarStore(name, b)
	if err != nil {
		return nil, err
	}
	esl, err := uefi.SignatureList(vbmcOwner, certs...)
	if err != nil {
		return nil, fmt.Errorf("Secure Boot db: %w", err)
	}
	if err := vs.Append("db", uefi.ImageSecurityDatabase, esl); err != nil {
		return nil, fmt.Errorf("Secure Boot db of %s (a template with Secure Boot keys enrolled, e.g. OVMF_VARS_4M.snakeoil.fd): %w", name, err)
	}
	return vs.Bytes(), nil
}

// startTPM runs the machine's swtpm for one boot; its state directory
// persists, so the TPM keeps its endorsement key across boots.
func (q *QEMUMachine) startTPM() (*exec.Cmd, error) {
	if err := os.MkdirAll(q.tpmDir(), 0o700); err != nil {
		return nil, err
	}
	if err := q.certifyEK(); err != nil {
		return nil, err
	}
	_ = os.Remove(q.tpmSock())
	cmd := exec.Command("swtpm", "socket", "--tpm2", "--tpmstate", "dir="+q.tpmDir(),
		"--ctrl", "type=unixio,path="+q.tpmSock(), "--terminate", "--log", "file="+filepath.Join(q.cfg.RunDir, "swtpm.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("qemu node %s: swtpm (apt install swtpm): %w", q.cfg.Name, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(q.tpmSock()); err == nil {
			return cmd, nil
		}
		if time.Now().After(deadline) {
			stopTPM(cmd)
			return nil, fmt.Errorf("qemu node %s: swtpm made no socket %s in 10s", q.cfg.Name, q.tpmSock())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopTPM ends a boot's swtpm (it also ends by itself when QEMU hangs up).
func stopTPM(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Kill()
	if err := cmd.Wait(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return
	}
}

// certifyEK writes the TPM's EK certificate (QEMUConfig.EKCertify) into its
// NV once, before its first boot, through a swtpm of its own on the same
// state: the EK is the one the runner derives (attest.NewKeys).
func (q *QEMUMachine) certifyEK() error {
	done := filepath.Join(q.tpmDir(), "ek-certified")
	if q.cfg.EKCertify == nil {
		return nil
	}
	if _, err := os.Stat(done); err == nil {
		return nil
	}
	sockDir, err := os.MkdirTemp("", "vtpm") // sun_path holds 108 bytes
	if err != nil {
		return err
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "s")
	cmd := exec.Command("swtpm", "socket", "--tpm2", "--tpmstate", "dir="+q.tpmDir(), "--server", "type=unixio,path="+sock,
		"--flags", "not-need-init,startup-clear")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("qemu node %s: swtpm for its EK certificate: %w", q.cfg.Name, err)
	}
	defer stopTPM(cmd)
	var tpm transport.TPMCloser
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if tpm, err = attest.DialSocket("unix", sock, time.Second); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("qemu node %s: swtpm for its EK certificate: %w", q.cfg.Name, err)
		}
	}
	defer tpm.Close()
	keys, err := attest.NewKeys(tpm)
	if err != nil {
		return fmt.Errorf("qemu node %s: %w", q.cfg.Name, err)
	}
	ekPub := keys.EKPublic
	keys.Close()
	ek, err := attest.PublicKey(ekPub)
	if err != nil {
		return err
	}
	pub, err := tpm2.Pub(*ek)
	if err != nil {
		return fmt.Errorf("qemu node %s: EK: %w", q.cfg.Name, err)
	}
	der, err := q.cfg.EKCertify(pub)
	if err != nil {
		return fmt.Errorf("qemu node %s: EK certificate: %w", q.cfg.Name, err)
	}
	if err := attest.WriteEKCert(tpm, ekPub, der); err != nil {
		return fmt.Errorf("qemu node %s: %w", q.cfg.Name, err)
	}
	return os.WriteFile(done, nil, 0o600)
}
