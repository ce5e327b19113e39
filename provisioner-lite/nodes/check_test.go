package nodes

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/store"
)

func knownSKUs(names ...string) Option {
	return WithSKUCheck(func(s string) error {
		for _, n := range names {
			if n == s {
				return nil
			}
		}
		return fmt.Errorf("unknown SKU %q", s)
	})
}

// An unknown SKU is reported at its own line and column, in both formats.
func TestUnknownSKUNamedWhereItIs(t *testing.T) {
	t.Setenv("CURE_TEST_BMC_PW", "from-env")
	_, err := ParseYAML("inv.yaml", []byte(goodYAML), knownSKUs("hgx-b200"))
	if err == nil || !strings.Contains(err.Error(), `inv.yaml:9:10: nodes[0].sku: unknown SKU "hgx-h100"`) {
		t.Fatalf("YAML: %v", err)
	}
	if _, err := ParseYAML("inv.yaml", []byte(goodYAML), knownSKUs("hgx-h100")); err != nil {
		t.Fatalf("YAML with a known SKU: %v", err)
	}
	_, err = ParseCSV("inv.csv", []byte(goodCSV), knownSKUs("hgx-b200"))
	if err == nil || !strings.Contains(err.Error(), `inv.csv:3:76: sku: unknown SKU "hgx-h100"`) || !strings.Contains(err.Error(), `inv.csv:4:`) {
		t.Fatalf("CSV: %v", err)
	}
}

// One node's mapping is a document too (curectl nodes add -f).
func TestYAMLSnippet(t *testing.T) {
	doc := "id: gpu-009\nbmc: {url: https://10.0.0.19, username: admin, password: pw}\nmacs: [52:54:00:aa:00:09]\nlabels: {pool: burnin}\n"
	got, err := ParseYAML("snippet.yaml", []byte(doc))
	if err != nil || len(got) != 1 || got[0].ID != "gpu-009" || got[0].Labels["pool"] != "burnin" {
		t.Fatalf("snippet: %+v, %v", got, err)
	}
	_, err = ParseYAML("snippet.yaml", []byte("id: x\nmacs: [nope]\n"))
	if err == nil || !strings.Contains(err.Error(), "snippet.yaml:2:8: node.macs[0]") || !strings.Contains(err.Error(), "node.bmc: required") {
		t.Fatalf("bad snippet: %v", err)
	}
}

// Labels a selector could not name are refused in YAML and CSV; CSV has
// labels and psids columns like the YAML maps.
func TestLabelsAndCSVMaps(t *testing.T) {
	doc := "nodes:\n  - id: a\n    bmc: {url: https://h, username: u, password: p}\n    macs: [52:54:00:00:00:01]\n    labels: {\"ra,ck\": r1, pool: \"a=b\"}\n"
	_, err := ParseYAML("f.yaml", []byte(doc))
	if err == nil || !strings.Contains(err.Error(), `f.yaml:5:33: nodes[0].labels.pool: label pool: value "a=b"`) ||
		!strings.Contains(err.Error(), `nodes[0].labels.ra,ck: label name "ra,ck"`) {
		t.Fatalf("bad labels: %v", err)
	}
	csv := "id,bmc_url,bmc_username,bmc_password,macs,sku,hostname,serial,labels,psids\n" +
		"a,https://h,u,p,52:54:00:00:00:01,s,,,rack=r1;pool=burnin,D1=ABCDEFGHIJKLMNOPQRSTUVWXYZ012345\n"
	got, err := ParseCSV("f.csv", []byte(csv))
	if err != nil || !reflect.DeepEqual(got[0].Labels, map[string]string{"rack": "r1", "pool": "burnin"}) || got[0].PSIDs["D1"] != "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345" {
		t.Fatalf("CSV maps: %+v, %v", got, err)
	}
	_, err = ParseCSV("f.csv", []byte(strings.Replace(csv, "rack=r1;pool=burnin", "rack;pool=x y", 1)))
	if err == nil || !strings.Contains(err.Error(), `f.csv:2:39: labels: entry 1 "rack": want key=value`) {
		t.Fatalf("bad CSV labels: %v", err)
	}
	_, err = ParseCSV("f.csv", []byte(strings.Replace(csv, "D1=ABCD", "D1=ABC", 1)))
	if err == nil || !strings.Contains(err.Error(), "psids: entry 1: disk D1: PSID has 31 characters") {
		t.Fatalf("bad CSV psid: %v", err)
	}
}

// Check holds a node built from flags or an API call to the file's rules,
// naming fields as the YAML does, and normalises what the file would.
func TestCheck(t *testing.T) {
	good := store.Node{ID: "n1", BMCURL: "https://10.0.0.1", BMCUser: "admin", BMCPassword: "pw", SKU: "hgx-b200",
		MACs: []string{"52-54-00-AA-00-01"}, BMCFingerprint: strings.Repeat("AB:", 31) + "AB", Labels: map[string]string{"rack": "r1"}}
	n := good
	if err := Check(&n, knownSKUs("hgx-b200")); err != nil {
		t.Fatalf("good node: %v", err)
	}
	if n.MACs[0] != "52:54:00:aa:00:01" || n.BMCFingerprint != "sha256:"+strings.Repeat("ab", 32) || n.BMCPassword != "pw" {
		t.Fatalf("not normalised: %+v", n)
	}
	bad := store.Node{ID: "-x", BMCURL: "ftp://h", MACs: []string{"52:54:00:aa:00:01", "52-54-00-aa-00-01", "zz"}, SKU: "hgx-h999",
		BMCFingerprint: "abc", BMCInsecure: true, Labels: map[string]string{"a b": "c"}, PSIDs: map[string]string{"D1": "short"}, Hostname: "bad_host"}
	before := fmt.Sprintf("%+v", bad)
	err := Check(&bad, knownSKUs("hgx-b200"))
	for _, want := range []string{"id: ", "bmc.url: ", "bmc.username: required", "bmc.password: password, passwordEnv or passwordFile required",
		"bmc.fingerprint: ", "sku: unknown SKU", "macs[1]: MAC 52:54:00:aa:00:01 listed twice", "macs[2]: ", "psids: disk D1", `labels.a b: label name "a b"`, "hostname: "} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check: %v\nwant %q", err, want)
		}
	}
	if fmt.Sprintf("%+v", bad) != before {
		t.Fatal("a refused node was changed")
	}
	// Plain http without insecure, and a password both literal and by reference.
	h := good
	h.BMCURL, h.BMCPasswordRef = "http://10.0.0.1", "env:NOPE_NOT_SET"
	err = Check(&h)
	if err == nil || !strings.Contains(err.Error(), "bmc.url: ") || !strings.Contains(err.Error(), "bmc.password: both password and passwordEnv set") {
		t.Fatalf("http + two passwords: %v", err)
	}
	if errors.Is(err, nil) {
		t.Fatal("unreachable")
	}
}
