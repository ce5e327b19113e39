package wipe

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestWipeQEMUFormat boots the CURE kernel with a throwaway initramfs whose
// /init (internal/qemuinit) runs the real probe/plan/execute path against
// QEMU's emulated NVMe controller, then checks the console and the disk
// image. Needs what bootWipeGuest needs.
func TestWipeQEMUFormat(t *testing.T) {
	con, diskPath := bootWipeGuest(t, "",
		[]string{"crct10dif_generic", "crc64_rocksoft_generic", "nvme"},
		"-device", "nvme,serial=CUREWIPE0001,drive=d0")

	// QEMU rejects the security and sanitize commands with its real status.
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`step=opal-discovery notcg=true err=.*nvme admin opcode 0x82: Invalid Command Opcode \(SCT 0x0 SC 0x01, status 0x4001\)`),
		regexp.MustCompile(`step=opal-ioctl notcg=true err=opal get status: ioctl 0x800870ec: kernel reports no Opal support`),
		regexp.MustCompile(`step=sanitize err=sanitize \(block erase\): nvme admin opcode 0x84: Invalid Command Opcode \(SCT 0x0 SC 0x01, status 0x4001\)`),
		regexp.MustCompile(`step=plan-crypto-erase err=.*no erase method satisfies policy crypto-erase`),
		regexp.MustCompile(`step=guard-audit err=wipe refused: mode audit never writes`),
		regexp.MustCompile(`step=plan method=nvme-format-user-data`),
	} {
		if !want.MatchString(con) {
			logConsole(t, con)
			t.Errorf("console lacks %s", want)
		}
	}
	var res Result
	for _, line := range strings.Split(con, "\n") {
		if j, ok := strings.CutPrefix(strings.TrimSpace(line), "CURE-WIPE-RESULT "); ok {
			if err := json.Unmarshal([]byte(j), &res); err != nil {
				t.Fatalf("result line: %v", err)
			}
		}
	}
	if !res.Verified || res.Method != MethodFormatUserData || res.Serial != "CUREWIPE0001" || len(res.Attempts) != 1 || res.Attempts[0].Error != "" {
		t.Fatalf("result %+v", res)
	}
	ev := strings.Join(res.Evidence, "\n")
	if strings.Contains(ev, "STILL PRESENT") || strings.Count(ev, "marker gone, now all zeros") != 18 {
		t.Errorf("evidence:\n%s", ev)
	}
	t.Logf("format NVM took %s (verify included: %s); evidence:\n%s", res.Erase, res.Total, ev)

	// Independent of the guest: the image file no longer holds the marker
	// token nor the data that was there before.
	img, err := os.ReadFile(diskPath)
	if err != nil {
		t.Fatal(err)
	}
	token, err := hex.DecodeString(res.Marker)
	if err != nil || len(token) != 16 {
		t.Fatalf("marker %q", res.Marker)
	}
	if bytes.Contains(img, token) {
		t.Error("marker token still in the disk image after Format NVM")
	}
	if bytes.Contains(img, []byte("OLD-USER-DATA")) {
		t.Error("pre-existing data survived Format NVM")
	}
	if bytes.Count(img[:1<<20], []byte{0}) != 1<<20 {
		t.Error("first MiB of the image is not zero")
	}
}
