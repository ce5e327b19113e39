package boot

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Verified network boot: the signed image's command line is fixed, so the
// per-boot parameters (coordinator, node, token) come over HTTPS from the
// server the firmware loaded the image from, found in the firmware's boot
// option (BootCurrent's device path holds the URI and the NIC's MAC), the
// connection pinned to the CA baked in the image.

// EFIVarsDir is where efivarfs is mounted.
const EFIVarsDir = "/sys/firmware/efi/efivars"

// globalVar is EFI_GLOBAL_VARIABLE's suffix in efivarfs names.
const globalVar = "-8be4df61-93ca-11d2-aa0d-00e098032b8c"

// HTTPSBoot is what the firmware's boot option says about this boot.
type HTTPSBoot struct {
	Option     string           // e.g. Boot0100
	URI        string           // the image's URI
	MAC        net.HardwareAddr // the NIC the option boots from (nil: none in the path)
	SecureBoot bool             // the SecureBoot variable is 1: firmware enforced signatures
}

// BaseURL is the boot server the image came from: scheme and host of URI.
func (b HTTPSBoot) BaseURL() (string, error) {
	u, err := url.Parse(b.URI)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("boot option %s: URI %q is not an https:// URL", b.Option, b.URI)
	}
	return u.Scheme + "://" + u.Host, nil
}

// MountEFIVars mounts efivarfs at dir unless something is mounted there.
func MountEFIVars(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "BootCurrent"+globalVar)); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("efivarfs", dir, "efivarfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("mounting efivarfs on %s: %w", dir, err)
	}
	return nil
}

// readVar is an efivarfs variable's data (after its 4 attribute bytes).
func readVar(dir, name string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(dir, name+globalVar))
	if err != nil {
		return nil, err
	}
	if len(b) < 4 {
		return nil, fmt.Errorf("EFI variable %s: %d bytes, want attributes and data", name, len(b))
	}
	return b[4:], nil
}

// ReadHTTPSBoot reads BootCurrent and its Boot#### load option from an
// efivarfs directory.
func ReadHTTPSBoot(dir string) (HTTPSBoot, error) {
	var hb HTTPSBoot
	cur, err := readVar(dir, "BootCurrent")
	if err != nil {
		return hb, fmt.Errorf("firmware boot option: %w", err)
	}
	if len(cur) != 2 {
		return hb, fmt.Errorf("EFI variable BootCurrent: %d bytes, want 2", len(cur))
	}
	hb.Option = fmt.Sprintf("Boot%04X", binary.LittleEndian.Uint16(cur))
	opt, err := readVar(dir, hb.Option)
	if err != nil {
		return hb, fmt.Errorf("firmware boot option: %w", err)
	}
	if sb, err := readVar(dir, "SecureBoot"); err == nil && len(sb) == 1 && sb[0] == 1 {
		hb.SecureBoot = true
	}
	// EFI_LOAD_OPTION: Attributes u32, FilePathListLength u16, Description
	// (NUL-terminated UCS-2), FilePathList.
	if len(opt) < 6 {
		return hb, fmt.Errorf("%s: load option of %d bytes", hb.Option, len(opt))
	}
	fpl := int(binary.LittleEndian.Uint16(opt[4:]))
	i := 6
	for ; i+1 < len(opt); i += 2 {
		if opt[i] == 0 && opt[i+1] == 0 {
			break
		}
	}
	i += 2
	if i+fpl > len(opt) {
		return hb, fmt.Errorf("%s: device path (%d bytes at %d) runs past the option (%d bytes)", hb.Option, fpl, i, len(opt))
	}
	dp := opt[i : i+fpl]
	for len(dp) >= 4 {
		typ, sub, n := dp[0], dp[1], int(binary.LittleEndian.Uint16(dp[2:]))
		if n < 4 || n > len(dp) {
			return hb, fmt.Errorf("%s: malformed device path node (length %d)", hb.Option, n)
		}
		switch {
		case typ == 0x7f:
			dp = nil
			continue
		case typ == 3 && sub == 11 && n >= 4+6: // MAC
			hb.MAC = append(net.HardwareAddr(nil), dp[4:10]...)
		case typ == 3 && sub == 24: // URI
			hb.URI = string(dp[4:n])
		}
		dp = dp[n:]
	}
	if hb.URI == "" {
		return hb, fmt.Errorf("%s is not a URI boot option: the node did not boot over UEFI HTTP", hb.Option)
	}
	return hb, nil
}

// FetchBootParams asks the boot server for this boot's parameters (a
// kernel command line fragment: cure.coordinator, cure.http, cure.node,
// cure.token) over TLS that trusts only caFile; mac names the booting NIC.
func FetchBootParams(ctx context.Context, base, mac, caFile string) (string, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return "", fmt.Errorf("boot parameters: the image's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return "", fmt.Errorf("boot parameters: no PEM certificate in %s", caFile)
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}, Proxy: nil}}
	u := strings.TrimRight(base, "/") + "/v1/boot/" + mac
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("boot parameters: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", fmt.Errorf("boot parameters: GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("boot parameters: GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(b)))
	}
	s := strings.TrimSpace(string(b))
	for _, f := range splitCmdline(s) {
		if !strings.HasPrefix(f, "cure.") {
			return "", errors.New("boot parameters: the server sent a non-CURE parameter " + fmt.Sprintf("%q", f))
		}
	}
	return s, nil
}

// ReadPCRs is "N=hex ..." for the sha256 PCRs the kernel shows under
// sysRoot/class/tpm/tpm0/pcr-sha256 ("" without a TPM).
func ReadPCRs(sysRoot string, pcrs ...int) string {
	var out []string
	for _, n := range pcrs {
		b, err := os.ReadFile(filepath.Join(sysRoot, "class/tpm/tpm0/pcr-sha256", fmt.Sprint(n)))
		if err != nil {
			continue
		}
		out = append(out, fmt.Sprintf("%d=%s", n, strings.ToLower(strings.TrimSpace(string(b)))))
	}
	return strings.Join(out, " ")
}
