package nodes

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/store"
)

// The password of a BMC URL with userinfo, however the URL is spelled.
const urlSecret = "Zq7-pw-in-url"

var credentialURLs = []string{
	"https://admin:" + urlSecret + "@10.0.0.1",
	"https://admin:" + urlSecret + "@10.0.0.1:443/redfish/v1",
	"HTTPS://admin:" + urlSecret + "@10.0.0.1",
	"http://admin:" + urlSecret + "@10.0.0.1",
	"https//admin:" + urlSecret + "@10.0.0.1",
	"https:admin:" + urlSecret + "@10.0.0.1",
	"admin:" + urlSecret + "@10.0.0.1",
	"https://admin:" + urlSecret + "/x@10.0.0.1",
	"https://admin:" + urlSecret + "@@10.0.0.1",
	"https://" + urlSecret + "@10.0.0.1",
	"https://admin:" + urlSecret + "%zz@10.0.0.1",
}

// TestBMCURLCredentialsRefused: a BMC URL carrying userinfo is refused by
// every way in (YAML, CSV, Check), the error names the file, line and field,
// and the password appears in no error, whatever else is wrong with the URL.
func TestBMCURLCredentialsRefused(t *testing.T) {
	for i, u := range credentialURLs {
		yaml := fmt.Sprintf("nodes:\n  - id: a\n    macs: [52:54:00:00:00:01]\n    bmc:\n      url: %q\n      username: u\n      password: p\n", u)
		_, err := ParseYAML("site/nodes.yaml", []byte(yaml))
		checkRefused(t, u, err, "site/nodes.yaml:5:12: nodes[0].bmc.url: ")

		csv := "id,bmc_url,bmc_username,bmc_password,macs,sku,hostname,serial\n" + fmt.Sprintf("a,%s,u,p,52:54:00:00:00:01,,,\n", u)
		_, err = ParseCSV("site/nodes.csv", []byte(csv))
		checkRefused(t, u, err, "site/nodes.csv:2:3: bmc_url: ")

		n := store.Node{ID: fmt.Sprintf("n%d", i), BMCURL: u, BMCUser: "u", BMCPassword: "p", MACs: []string{"52:54:00:00:00:01"}}
		checkRefused(t, u, Check(&n), "bmc.url: ")
	}
	// The URL where another kind of value is expected is quoted redacted too.
	for _, doc := range []string{
		"nodes:\n  - id: a\n    macs: [52:54:00:00:00:01]\n    bmc: https://admin:" + urlSecret + "@10.0.0.1\n",
		"nodes:\n  - id: a\n    macs: [52:54:00:00:00:01]\n    bmc: {url: https://h, username: u, password: p, insecure: https://admin:" + urlSecret + "@h}\n",
		"nodes:\n  - id: \"https://admin:" + urlSecret + "@h\"\n    macs: [52:54:00:00:00:01]\n    bmc: {url: https://h, username: u, password: p}\n",
	} {
		_, err := ParseYAML("site/nodes.yaml", []byte(doc))
		if err == nil || strings.Contains(err.Error(), urlSecret) {
			t.Errorf("%q: %v", doc, err)
		}
	}
}

func checkRefused(t *testing.T, u string, err error, where string) {
	t.Helper()
	if err == nil {
		t.Errorf("%q accepted", u)
		return
	}
	if strings.Contains(err.Error(), urlSecret) {
		t.Errorf("%q: the error shows the password: %v", u, err)
	}
	var first error = err
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		first = j.Unwrap()[0]
	}
	if !strings.HasPrefix(first.Error(), where) || !strings.Contains(first.Error(), "credentials in the URL") {
		t.Errorf("%q: first problem %q, want it at %q naming the credentials", u, first, where)
	}
	if errors.Is(err, errNoPassword) {
		t.Errorf("%q: %v", u, err)
	}
}
