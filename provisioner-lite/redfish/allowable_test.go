package redfish

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestAllowList(t *testing.T) {
	for _, tc := range []struct {
		in    string
		known []string
		want  []string
	}{
		{`[["SCP"]]`, transferProtocols, []string{"SCP"}}, // nested: one vendor's UpdateService
		{`["HTTP","HTTPS"]`, transferProtocols, []string{"HTTP", "HTTPS"}},
		{`"HTTPS, SFTP"`, transferProtocols, []string{"HTTPS", "SFTP"}},
		{`["https", null, 3, ["Oem"]]`, transferProtocols, []string{"HTTPS", "OEM"}},
		{`["GracefulShutdownGracefulRestart","ForceOff"]`, resetTypes, []string{"GracefulShutdown", "GracefulRestart", "ForceOff"}},
		{`["ForceOnForceOffOn"]`, resetTypes, []string{"ForceOn", "ForceOff", "On"}},
		{`["OnFoo"]`, resetTypes, []string{"OnFoo"}}, // not all known: kept as sent
		{`{"a":1}`, resetTypes, nil},
		{`not json`, resetTypes, nil},
	} {
		var l allowList
		if err := json.Unmarshal([]byte(tc.in), &l); err != nil && json.Valid([]byte(tc.in)) {
			t.Errorf("%s: %v", tc.in, err)
		}
		if got := normalizeAllowed(l, tc.known); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The run-together reset value no longer makes the planner refuse the
// end-of-run graceful shutdown.
func TestChooseResetRunTogether(t *testing.T) {
	var l allowList
	_ = json.Unmarshal([]byte(`["On","ForceOff","GracefulShutdownGracefulRestart"]`), &l)
	if rt, err := chooseReset("GracefulShutdown", normalizeAllowed(l, resetTypes)); err != nil || rt != "GracefulShutdown" {
		t.Fatalf("chooseReset = %q, %v; want GracefulShutdown", rt, err)
	}
}

func TestSimpleUpdateFetches(t *testing.T) {
	caps, _, err := parseUpdateService([]byte(`{"@odata.id":"/redfish/v1/UpdateService","MultipartHttpPushUri":"/redfish/v1/UpdateService/upload",
		"Actions":{"#UpdateService.SimpleUpdate":{"target":"/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate","TransferProtocol@Redfish.AllowableValues":[["SCP"]]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(caps.TransferProtocols, []string{"SCP"}) || caps.SimpleUpdateFetches("http://10.0.0.1/fw.bin") || !caps.SimpleUpdateFetches("scp://10.0.0.1/fw.bin") {
		t.Fatalf("caps %+v: want SCP only, HTTP refused, SCP fetched", caps)
	}
}

func FuzzAllowList(f *testing.F) {
	for _, s := range []string{`[["SCP"]]`, `["GracefulShutdownGracefulRestart"]`, `"HTTPS, SFTP"`, `[[[[[[[[[["x"]]]]]]]]]]`, `[null,1,{}]`, `["HTTP, SCP","",";|x"]`, `["a",2]`, `"` + strings.Repeat("On", 40) + `"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var l allowList
		if err := json.Unmarshal(b, &l); err != nil && json.Valid(b) {
			t.Fatalf("valid JSON refused: %v", err)
		}
		// The flat-array fast path reads what the generic walk reads.
		if json.Valid(b) && !slices.Equal([]string(l), allowWalk(b)) {
			t.Fatalf("fast path %q, walk %q", l, allowWalk(b))
		}
		for _, known := range [][]string{resetTypes, transferProtocols} {
			out := normalizeAllowed(l, known)
			if len(out) > maxAllowable*4 {
				t.Fatalf("%d values kept", len(out))
			}
			for _, v := range out {
				if v == "" || len(v) > 64 || !utf8.ValidString(v) && json.Valid(b) {
					t.Fatalf("value %q kept", v)
				}
			}
			// Idempotent: normalising again changes nothing.
			if again := normalizeAllowed(out, known); !slices.Equal(again, out) {
				t.Fatalf("not idempotent: %q then %q", out, again)
			}
		}
	})
}

// A Bios without @Redfish.Settings: an Oem settings link when the vendor
// publishes one, otherwise the Bios resource itself.
func TestBiosSettingsFallback(t *testing.T) {
	for _, tc := range []struct {
		body, want string
		self       bool
		err        bool
	}{
		{`{"@odata.id":"/redfish/v1/Systems/1/Bios","@Redfish.Settings":{"SettingsObject":{"@odata.id":"/redfish/v1/Systems/1/Bios/SD"}}}`, "/redfish/v1/Systems/1/Bios/SD", false, false},
		{`{"@odata.id":"/redfish/v1/Systems/1/bios","Oem":{"Hp":{"Links":{"Settings":{"href":"/redfish/v1/Systems/1/bios/Settings"}}}}}`, "/redfish/v1/Systems/1/bios/Settings", false, false},
		{`{"@odata.id":"/redfish/v1/Systems/1/Bios","Oem":{"Vendor":{"SettingsObject":{"@odata.id":"/redfish/v1/Systems/1/Bios/Pending"}}}}`, "/redfish/v1/Systems/1/Bios/Pending", false, false},
		{`{"@odata.id":"/redfish/v1/Systems/1/Bios","Attributes":{"A":1}}`, "/redfish/v1/Systems/1/Bios", true, false},
		// An absolute link is followed only as a path on this BMC.
		{`{"@odata.id":"/redfish/v1/Systems/1/Bios","Oem":{"X":{"SettingsObject":{"@odata.id":"https://evil.example/x"}}}}`, "/x", false, false},
		{`{"@odata.id":"/redfish/v1/Systems/1/Bios","Oem":{"X":{"SettingsObject":{"@odata.id":"../x"}}}}`, "", false, true},
	} {
		doc, err := parseBios([]byte(tc.body))
		if tc.err {
			if err == nil {
				t.Errorf("%s: accepted settings link %q off the BMC", tc.body, doc.Settings.SettingsObject.ID)
			}
			continue
		}
		if err != nil || doc.Settings == nil || doc.Settings.SettingsObject.ID != tc.want || doc.selfSettings != tc.self {
			t.Errorf("%s: %+v %v; want settings %s self=%v", tc.body, doc, err, tc.want, tc.self)
		}
	}
}

// The vendor captures the virtual BMC's profiles come from, through the
// driver's own parsers.
func TestProfileCaptures(t *testing.T) {
	read := func(p string) []byte {
		b, err := os.ReadFile(filepath.Join("../../qemu-test/vbmc/profiles", p))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	caps, info, err := parseUpdateService(read("supermicro/UpdateService.json"))
	if err != nil || !caps.SimpleUpdate || caps.MultipartPushURI != "/redfish/v1/UpdateService/upload" || info != "/redfish/v1/UpdateService/SimpleUpdateActionInfo" {
		t.Errorf("Supermicro UpdateService: %+v, ActionInfo %q, %v", caps, info, err)
	}
	caps, _, err = parseUpdateService(read("issue13/UpdateService-nested-scp.json"))
	if err != nil || !slices.Equal(caps.TransferProtocols, []string{"SCP"}) || caps.SimpleUpdateFetches("http://a/b") {
		t.Errorf("nested SCP UpdateService: %+v, %v", caps, err)
	}
	doc, err := parseBios(read("lenovo-xcc/Bios-settings.json"))
	if err != nil || doc.Settings.SettingsObject.ID != "/redfish/v1/Systems/1/Pending" || doc.selfSettings {
		t.Errorf("Lenovo settings: %+v, %v", doc, err)
	}
	doc, err = parseBios(read("issue13/Bios-no-settings.json"))
	if err != nil || !doc.selfSettings || doc.Settings.SettingsObject.ID != "/redfish/v1/Systems/1/Bios" {
		t.Errorf("Bios without settings: %+v, %v", doc, err)
	}
	target, err := parseSystemReset(read("issue13/System-reset-run-together.json"))
	var sys struct {
		Actions struct {
			Reset struct {
				Allowed allowList `json:"ResetType@Redfish.AllowableValues"`
			} `json:"#ComputerSystem.Reset"`
		}
	}
	_ = json.Unmarshal(read("issue13/System-reset-run-together.json"), &sys)
	if rt, cerr := chooseReset("GracefulShutdown", normalizeAllowed(sys.Actions.Reset.Allowed, resetTypes)); err != nil || cerr != nil || rt != "GracefulShutdown" || target != "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset" {
		t.Errorf("run-together resets: target %q %v, chose %q %v", target, err, rt, cerr)
	}
}
