package nodes

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// checkParsed holds what every successful import must satisfy, whatever the
// input: the validators accept every value, ids and MACs are unique, a plain
// http:// BMC is insecure by the inventory's word, a pin is normalised and
// never combined with insecure, and exactly one password source is kept.
func checkParsed(t *testing.T, ns []store.Node, err error, name string) {
	t.Helper()
	if err != nil {
		if len(ns) != 0 {
			t.Fatalf("error with %d nodes: %v", len(ns), err)
		}
		if !strings.HasPrefix(err.Error(), name+":") {
			t.Fatalf("error does not start with the file name %q: %v", name, err)
		}
		return
	}
	if len(ns) == 0 {
		t.Fatal("no error and no nodes")
	}
	ids, macs := map[string]bool{}, map[string]bool{}
	for _, n := range ns {
		if err := checkID(n.ID); err != nil || ids[n.ID] {
			t.Fatalf("node id %q accepted (%v, duplicate %v)", n.ID, err, ids[n.ID])
		}
		ids[n.ID] = true
		if len(n.MACs) == 0 {
			t.Fatalf("node %s without MACs", n.ID)
		}
		for _, m := range n.MACs {
			if nm, err := store.NormalizeMAC(m); err != nil || nm != m || macs[m] {
				t.Fatalf("node %s MAC %q (normalised %q, %v, duplicate %v)", n.ID, m, nm, err, macs[m])
			}
			macs[m] = true
		}
		if err := checkBMCURL(n.BMCURL); err != nil {
			t.Fatalf("node %s BMC URL %q: %v", n.ID, n.BMCURL, err)
		}
		if strings.Contains(n.BMCURL, "@") {
			t.Fatalf("node %s: BMC URL %q with userinfo accepted", n.ID, n.BMCURL)
		}
		if strings.HasPrefix(n.BMCURL, "http:") && !n.BMCInsecure {
			t.Fatalf("node %s: http:// BMC without insecure", n.ID)
		}
		if n.BMCFingerprint != "" {
			if fp, err := redfish.NormalizeFingerprint(n.BMCFingerprint); err != nil || fp != n.BMCFingerprint {
				t.Fatalf("node %s fingerprint %q not normalised (%q, %v)", n.ID, n.BMCFingerprint, fp, err)
			}
			if n.BMCInsecure || n.BMCCAFile != "" {
				t.Fatalf("node %s: pin together with insecure %v / caFile %q", n.ID, n.BMCInsecure, n.BMCCAFile)
			}
		}
		if n.BMCCAFile != "" && (!filepath.IsAbs(n.BMCCAFile) || n.BMCInsecure) {
			t.Fatalf("node %s caFile %q (insecure %v)", n.ID, n.BMCCAFile, n.BMCInsecure)
		}
		if (n.BMCPassword == "") == (n.BMCPasswordRef == "") {
			t.Fatalf("node %s: password %q and reference %q: want exactly one", n.ID, n.BMCPassword, n.BMCPasswordRef)
		}
		if n.BMCUser == "" {
			t.Fatalf("node %s without a BMC username", n.ID)
		}
		if err := checkHostname(n.Hostname); err != nil {
			t.Fatalf("node %s hostname: %v", n.ID, err)
		}
		for serial, psid := range n.PSIDs {
			if err := checkPSID(serial, psid); err != nil {
				t.Fatalf("node %s: %v", n.ID, err)
			}
		}
		for k, v := range n.Labels {
			if err := CheckLabel(k, v); err != nil {
				t.Fatalf("node %s: %v", n.ID, err)
			}
		}
	}
}

func FuzzParseYAML(f *testing.F) {
	f.Add(goodYAML)
	f.Add("nodes:\n  - id: a\n    bmc: &b {url: https://h, username: u, password: p, fingerprint: \"" + pinHex + "\"}\n    macs: [52:54:00:00:00:01]\n  - id: b\n    bmc: *b\n    macs: [52-54-00-00-00-02]\n")
	f.Add("nodes:\n  - id: a\n    bmc: {url: http://h, username: u, password: p, insecure: true}\n    macs: [52:54:00:00:00:01]\n")
	f.Add("nodes:\n  - id: a\n    bmc: {url: https://h, username: u, passwordFile: /etc/hostname, caFile: /etc/ssl/certs/ca-certificates.crt, insecure: false}\n    macs: [52:54:00:00:00:01]\n    psids: {D1: ABCDEFGHIJKLMNOPQRSTUVWXYZ012345}\n")
	f.Add("nodes: [\n")
	f.Add("id: a\nbmc: {url: https://h, username: u, password: p}\nmacs: [52:54:00:00:00:01]\nlabels: {rack: r1, \"x y\": z}\n")
	f.Add("nodes:\n  - id: a\n    bmc: {url: http://h, username: u, password: p, fingerprint: " + strings.Repeat("ab", 32) + ", insecure: true}\n    macs: [52:54:00:00:00:01]\n")
	f.Fuzz(func(t *testing.T, doc string) {
		ns, err := ParseYAML("fuzz.yaml", []byte(doc))
		checkParsed(t, ns, err, "fuzz.yaml")
	})
}

func FuzzParseCSV(f *testing.F) {
	f.Add(goodCSV)
	f.Add("macs,id,sku,hostname,serial,bmc_url,bmc_username,bmc_password,bmc_password_env\n52:54:00:aa:00:09,n9,s,,,https://h,u,,HOME\n")
	f.Add("id,bmc_url,bmc_username,bmc_password,macs,sku,hostname,serial,bmc_fingerprint,bmc_insecure,bmc_ca_file,bmc_password_file\n" +
		"a,https://10.0.0.1,u,p,52:54:00:00:00:01,s,,," + pinHex + ",false,,\nb,http://10.0.0.2,u,p,52:54:00:00:00:02,s,,,,true,,\n")
	f.Add("\ufeffid,bmc_url\n\"a\n")
	f.Add("id,bmc_url,bmc_username,bmc_password,macs,sku,hostname,serial,labels,psids\na,https://h,u,p,52:54:00:00:00:01,s,,,rack=r1;x=,D1=ABCDEFGHIJKLMNOPQRSTUVWXYZ012345;D1=x\n")
	f.Fuzz(func(t *testing.T, doc string) {
		ns, err := ParseCSV("fuzz.csv", []byte(doc))
		checkParsed(t, ns, err, "fuzz.csv")
	})
}

// FuzzBMCURLRedacted: a BMC URL with a password in it, spelled any way,
// is refused, and no error of Check or of either file format shows the
// password (it carries a byte that nothing else in the input has).
func FuzzBMCURLRedacted(f *testing.F) {
	f.Add("https://admin:", "Zq7-pw", "@10.0.0.1")
	f.Add("https//", "Zq7-pw", "@@h:99999")
	f.Add("", "p%zz/w", "@h")
	check := func(u string) error {
		n := store.Node{ID: "a", BMCURL: u, BMCUser: "u", BMCPassword: "p", MACs: []string{"52:54:00:00:00:01"}}
		return Check(&n)
	}
	csv := func(u string) error {
		_, err := ParseCSV("f.csv", []byte("id,bmc_url,bmc_username,bmc_password,macs,sku,hostname,serial\na,"+u+",u,p,52:54:00:00:00:01,,,\n"))
		return err
	}
	f.Fuzz(func(t *testing.T, before, secret, after string) {
		u := before + secret + after
		bare := !strings.ContainsAny(u, "\r\n\",") // a CSV field written bare
		// What the errors say without the secret is not a leak of it.
		other := before + after + textsafe.Redacted + fmt.Sprint(check(before+after))
		if bare {
			other += fmt.Sprint(csv(before + after))
		}
		if !strings.Contains(after, "@") || !hasUniqueByte(secret, other) {
			return
		}
		if err := check(u); err == nil || strings.Contains(err.Error(), secret) {
			t.Fatalf("Check of %q: %v", u, err)
		}
		if err := csv(u); bare && (err == nil || strings.Contains(err.Error(), secret)) {
			t.Fatalf("CSV with %q: %v", u, err)
		}
	})
}

func hasUniqueByte(s, other string) bool {
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(other, s[i]) < 0 {
			return true
		}
	}
	return false
}
