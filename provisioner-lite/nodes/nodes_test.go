package nodes

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/store"
)

const goodYAML = `# two nodes
nodes:
  - id: gpu-001
    bmc:
      url: https://10.0.0.11
      username: admin
      password: s3cret
    macs: ["52:54:00:AA:00:01", "52-54-00-aa-00-02"]
    sku: hgx-h100
    hostname: gpu-001.dc1
    serial: SN001
    psids:
      S3EVNX0K123456: ABCDEFGHIJKLMNOPQRSTUVWXYZ012345
    labels: {rack: r12, row: "3"}
  - id: gpu-002
    bmc: {url: "http://127.0.0.1:8443/redfish", username: root, passwordEnv: CURE_TEST_BMC_PW, insecure: true}
    macs:
      - 52:54:00:aa:00:03
    ek_sha256: 90EECD06F4A653B15D34103F98A7E6AEBCA268D4D5230D91C0D72DA94A17094B
`

func TestYAML(t *testing.T) {
	t.Setenv("CURE_TEST_BMC_PW", "from-env")
	got, err := ParseYAML("inv.yaml", []byte(goodYAML))
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Node{
		{ID: "gpu-001", BMCURL: "https://10.0.0.11", BMCUser: "admin", BMCPassword: "s3cret",
			MACs: []string{"52:54:00:aa:00:01", "52:54:00:aa:00:02"}, SKU: "hgx-h100", Hostname: "gpu-001.dc1", SystemSerial: "SN001",
			PSIDs:  map[string]string{"S3EVNX0K123456": "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"},
			Labels: map[string]string{"rack": "r12", "row": "3"}},
		{ID: "gpu-002", BMCURL: "http://127.0.0.1:8443/redfish", BMCUser: "root", BMCPasswordRef: "env:CURE_TEST_BMC_PW", BMCInsecure: true,
			MACs: []string{"52:54:00:aa:00:03"}, EKSHA256: "90EECD06F4A653B15D34103F98A7E6AEBCA268D4D5230D91C0D72DA94A17094B"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseYAML =\n%+v\nwant\n%+v", got, want)
	}
}

func TestYAMLErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string // substrings of the error
	}{
		{"unknown field", "nodes:\n  - id: a\n    bmc: {url: https://h, username: u, password: p}\n    macs: [52:54:00:00:00:01]\n    colour: red\n",
			[]string{"f.yaml:5:5: nodes[0].colour: unknown field"}},
		{"ek not sha256", "nodes:\n  - id: a\n    bmc: {url: https://h, username: u, password: p}\n    macs: [52:54:00:00:00:01]\n    ek_sha256: abcd\n",
			[]string{"f.yaml:5:16: nodes[0].ek_sha256: want the 64 hex digits"}},
		{"unknown bmc field", "nodes:\n  - id: a\n    bmc: {url: https://h, username: u, password: p, port: 1}\n    macs: [52:54:00:00:00:01]\n",
			[]string{"f.yaml:3:53: nodes[0].bmc.port: unknown field"}},
		{"bad mac", "nodes:\n  - id: a\n    bmc: {url: https://h, username: u, password: p}\n    macs: [52:54:00:00:00:01, 52:54:00:zz:00:01]\n",
			[]string{"f.yaml:4:31: nodes[0].macs[1]: MAC \"52:54:00:zz:00:01\""}},
		{"duplicate id and mac", "nodes:\n  - id: a\n    bmc: {url: https://h, username: u, password: p}\n    macs: [52:54:00:00:00:01]\n  - id: a\n    bmc: {url: https://h, username: u, password: p}\n    macs: [52-54-00-00-00-01]\n",
			[]string{"f.yaml:5:9: nodes[1].id: duplicate id \"a\" (first defined at f.yaml:2:9)", "f.yaml:7:12: nodes[1].macs[0]: MAC 52:54:00:00:00:01 already used by node a at f.yaml:4:12"}},
		{"bad url", "nodes:\n  - id: a\n    bmc: {url: ftp://h, username: u, password: p}\n    macs: [52:54:00:00:00:01]\n",
			[]string{"f.yaml:3:16: nodes[0].bmc.url: \"ftp://h\": scheme \"ftp\""}},
		{"url with credentials", "nodes:\n  - id: a\n    bmc: {url: \"https://admin:pw@h\", username: u, password: p}\n    macs: [52:54:00:00:00:01]\n",
			[]string{"nodes[0].bmc.url", "credentials in the URL"}},
		{"missing fields", "nodes:\n  - sku: x\n",
			[]string{"f.yaml:2:5: nodes[0].id: required", "nodes[0].bmc: required", "nodes[0].macs: required"}},
		{"both passwords", "nodes:\n  - id: a\n    bmc: {url: https://h, username: u, password: p, passwordEnv: X}\n    macs: [52:54:00:00:00:01]\n",
			[]string{"f.yaml:3:10: nodes[0].bmc: both password and passwordEnv set: give exactly one of password, passwordEnv, passwordFile"}},
		{"no password", "nodes:\n  - id: a\n    bmc: {url: https://h, username: u}\n    macs: [52:54:00:00:00:01]\n",
			[]string{"f.yaml:3:10: nodes[0].bmc: password, passwordEnv or passwordFile required"}},
		{"http without insecure", "nodes:\n  - id: a\n    bmc: {url: http://h, username: u, password: p}\n    macs: [52:54:00:00:00:01]\n",
			[]string{"f.yaml:3:16: nodes[0].bmc.url: \"http://h\": plain http:// sends the BMC password in clear: use https://, or add insecure: true"}},
		{"http with insecure false", "nodes:\n  - id: a\n    bmc: {url: http://h, username: u, password: p, insecure: false}\n    macs: [52:54:00:00:00:01]\n",
			[]string{"f.yaml:3:16: nodes[0].bmc.url: \"http://h\": plain http://"}},
		{"insecure not a bool", "nodes:\n  - id: a\n    bmc: {url: https://h, username: u, password: p, insecure: \"yes\"}\n    macs: [52:54:00:00:00:01]\n",
			[]string{"f.yaml:3:63: nodes[0].bmc.insecure: want true or false, found scalar \"yes\""}},
		{"bad fingerprint", "nodes:\n  - id: a\n    bmc: {url: https://h, username: u, password: p, fingerprint: \"sha256:12:34\"}\n    macs: [52:54:00:00:00:01]\n",
			[]string{"f.yaml:3:66: nodes[0].bmc.fingerprint: fingerprint \"sha256:12:34\": 2 ':'-separated bytes: want 32"}},
		{"fingerprint and insecure", "nodes:\n  - id: a\n    bmc:\n      url: https://h\n      username: u\n      password: p\n      insecure: true\n      fingerprint: " + strings.Repeat("ab", 32) + "\n    macs: [52:54:00:00:00:01]\n",
			[]string{"f.yaml:8:20: nodes[0].bmc.fingerprint: contradicts insecure: true"}},
		{"missing caFile", "nodes:\n  - id: a\n    bmc: {url: https://h, username: u, password: p, caFile: /nonexistent/ca.pem}\n    macs: [52:54:00:00:00:01]\n",
			[]string{"f.yaml:3:61: nodes[0].bmc.caFile: open /nonexistent/ca.pem: no such file or directory"}},
		{"unset env", "nodes:\n  - id: a\n    bmc: {url: https://h, username: u, passwordEnv: CURE_TEST_UNSET_VAR}\n    macs: [52:54:00:00:00:01]\n",
			[]string{"CURE_TEST_UNSET_VAR (passwordEnv) is unset"}},
		{"bad psid", "nodes:\n  - id: a\n    bmc: {url: https://h, username: u, password: p}\n    macs: [52:54:00:00:00:01]\n    psids: {DISK1: short}\n",
			[]string{"f.yaml:5:20: nodes[0].psids.DISK1: disk DISK1: PSID has 5 characters"}},
		{"bad id", "nodes:\n  - id: \"a b\"\n    bmc: {url: https://h, username: u, password: p}\n    macs: [52:54:00:00:00:01]\n",
			[]string{"f.yaml:2:9: nodes[0].id: \"a b\""}},
		{"bad hostname", "nodes:\n  - id: a\n    hostname: under_score\n    bmc: {url: https://h, username: u, password: p}\n    macs: [52:54:00:00:00:01]\n",
			[]string{"f.yaml:3:15: nodes[0].hostname"}},
		{"macs not a list", "nodes:\n  - id: a\n    bmc: {url: https://h, username: u, password: p}\n    macs: 52:54:00:00:00:01\n",
			[]string{"f.yaml:4:11: nodes[0].macs: want a list"}},
		{"duplicate key", "nodes:\n  - id: a\n    id: b\n    bmc: {url: https://h, username: u, password: p}\n    macs: [52:54:00:00:00:01]\n",
			[]string{"f.yaml:3:5: nodes[0].id: duplicate key (first at line 2)"}},
		{"top-level typo", "node:\n  - id: a\n", []string{"f.yaml:1:1: node: unknown field", "nodes: required"}},
		{"not yaml", "nodes: [\n", []string{"f.yaml: yaml:"}},
		{"empty", "", []string{"f.yaml: empty document"}},
		{"empty list", "nodes: []\n", []string{"f.yaml:1:8: nodes: empty list"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseYAML("f.yaml", []byte(tc.doc))
			if err == nil {
				t.Fatal("ParseYAML succeeded, want error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

func TestYAMLAliases(t *testing.T) {
	doc := "bmcdefaults: &b {url: https://h, username: u, password: p}\n"
	if _, err := ParseYAML("f.yaml", []byte(doc)); err == nil || !strings.Contains(err.Error(), "bmcdefaults: unknown field") {
		t.Fatalf("top-level extra key: %v", err)
	}
	doc = "nodes:\n  - id: a\n    bmc: &b {url: https://h, username: u, password: p}\n    macs: [52:54:00:00:00:01]\n  - id: b\n    bmc: *b\n    macs: [52:54:00:00:00:02]\n"
	got, err := ParseYAML("f.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got[1].BMCURL != "https://h" || got[1].BMCUser != "u" {
		t.Fatalf("alias not followed: %+v", got[1])
	}
}

const goodCSV = `id,bmc_url,bmc_username,bmc_password,macs,sku,hostname,serial
# a comment line
gpu-001,https://10.0.0.11,admin,s3cret,52:54:00:AA:00:01;52-54-00-aa-00-02,hgx-h100,gpu-001.dc1,SN001
gpu-002,https://10.0.0.12,admin,"pa,ss",52:54:00:aa:00:03,hgx-h100,,SN002
`

func TestCSV(t *testing.T) {
	got, err := ParseCSV("inv.csv", []byte(goodCSV))
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Node{
		{ID: "gpu-001", BMCURL: "https://10.0.0.11", BMCUser: "admin", BMCPassword: "s3cret",
			MACs: []string{"52:54:00:aa:00:01", "52:54:00:aa:00:02"}, SKU: "hgx-h100", Hostname: "gpu-001.dc1", SystemSerial: "SN001"},
		{ID: "gpu-002", BMCURL: "https://10.0.0.12", BMCUser: "admin", BMCPassword: "pa,ss",
			MACs: []string{"52:54:00:aa:00:03"}, SKU: "hgx-h100", SystemSerial: "SN002"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseCSV =\n%+v\nwant\n%+v", got, want)
	}

	// Columns in another order, password from the environment.
	t.Setenv("CURE_TEST_BMC_PW", "env-pw")
	got, err = ParseCSV("inv.csv", []byte("macs,id,sku,hostname,serial,bmc_url,bmc_username,bmc_password,bmc_password_env\n52:54:00:aa:00:09,n9,s,,,https://h,u,,CURE_TEST_BMC_PW\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got[0].ID != "n9" || got[0].BMCPassword != "" || got[0].BMCPasswordRef != "env:CURE_TEST_BMC_PW" || got[0].MACs[0] != "52:54:00:aa:00:09" {
		t.Fatalf("reordered CSV = %+v", got)
	}
}

func TestCSVErrors(t *testing.T) {
	const hdr = "id,bmc_url,bmc_username,bmc_password,macs,sku,hostname,serial\n"
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"bad mac", hdr + "a,https://h,u,p,52:54:00:00:00:01;nope,s,,\n", []string{"f.csv:2:17: macs: entry 2: MAC \"nope\""}},
		{"bad url", hdr + "a,notaurl,u,p,52:54:00:00:00:01,s,,\n", []string{"f.csv:2:3: bmc_url: \"notaurl\""}},
		{"duplicate id and mac", hdr + "a,https://h,u,p,52:54:00:00:00:01,s,,\na,https://h,u,p,52:54:00:00:00:01,s,,\n",
			[]string{"f.csv:3:1: id: duplicate id \"a\" (first defined at f.csv:2:1: id)", "f.csv:3:17: macs: MAC 52:54:00:00:00:01 already used by node a"}},
		{"missing column", "id,bmc_url,bmc_username,bmc_password,macs,sku,hostname\n", []string{"f.csv:1: header: missing column \"serial\""}},
		{"unknown column", strings.TrimSuffix(hdr, "\n") + ",colour\n", []string{"f.csv:1:63: header: unknown column \"colour\""}},
		{"field count", hdr + "a,https://h,u,p,52:54:00:00:00:01\n", []string{"f.csv: record on line 2", "wrong number of fields"}},
		{"missing values", hdr + ",https://h,,,,s,,\n", []string{"f.csv:2:1: id: required", "f.csv:2:12: bmc_username: required", "f.csv:2:13: bmc_password: password, passwordEnv or passwordFile required", "f.csv:2:14: macs: required"}},
		{"no rows", hdr, []string{"f.csv: no nodes after the header"}},
		{"empty", "", []string{"f.csv: empty file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseCSV("f.csv", []byte(tc.doc))
			if err == nil {
				t.Fatal("ParseCSV succeeded, want error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadByExtension(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CURE_TEST_BMC_PW", "x")
	for name, body := range map[string]string{"a.yaml": goodYAML, "b.YML": goodYAML, "c.csv": goodCSV} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := Load(p)
		if err != nil || len(got) != 2 {
			t.Fatalf("Load(%s) = %d nodes, %v", name, len(got), err)
		}
	}
	p := filepath.Join(dir, "inv.json")
	os.WriteFile(p, []byte("{}"), 0o600)
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), `unknown extension ".json"`) {
		t.Fatalf("Load(.json): %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
}

// The imported nodes must be accepted by the store as is.
func TestImportIntoStore(t *testing.T) {
	t.Setenv("CURE_TEST_BMC_PW", "x")
	ns, err := ParseYAML("inv.yaml", []byte(goodYAML))
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(filepath.Join(t.TempDir(), "db"), store.WithStateKey(make([]byte, 32)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, n := range ns {
		if err := s.UpsertNode(t.Context(), n); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.NodeByMAC(t.Context(), "52-54-00-AA-00-02")
	if err != nil || got.ID != "gpu-001" || got.PSIDs["S3EVNX0K123456"] == "" {
		t.Fatalf("NodeByMAC after import = %+v, %v", got, err)
	}
}
