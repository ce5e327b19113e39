// Package firstboot renders the cloud-init NoCloud seed for an installed
// host OS and writes it to the image's CIDATA (vfat) partition.
//
// The host OS reports "ready" through cloud-init's phone_home module. That
// module cannot add an Authorization header, so the callback token travels
// twice: as the ?token= query parameter of the phone_home URL (what
// cloud-init sends) and in /etc/cure/callback-token (mode 0600, for agents
// such as hostready that send "Authorization: Bearer <token>"). The
// coordinator's callback endpoint accepts either.
package firstboot

import (
	"bytes"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// TokenPath is where the seed places the callback token on the host.
const TokenPath = "/etc/cure/callback-token"

// PhoneHomeTries is how often cloud-init retries the callback.
const PhoneHomeTries = 10

// Seed is the per-node first-boot configuration.
type Seed struct {
	InstanceID    string
	Hostname      string
	CallbackURL   string // absolute http(s) URL of the host-ready callback
	CallbackToken string
	// ExtraUserData is #cloud-config YAML whose top-level keys are added to
	// the generated user-data; a key the seed already sets is refused.
	ExtraUserData string
}

var (
	hostnameRE = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$`)
	tokenRE    = regexp.MustCompile(`^[\x21-\x7e]+$`) // printable, no spaces
)

func (s Seed) validate() error {
	if strings.TrimSpace(s.InstanceID) == "" || strings.ContainsAny(s.InstanceID, "\n\r") {
		return fmt.Errorf("first-boot seed: instance id %q: expected a non-empty single line", s.InstanceID)
	}
	if len(s.Hostname) > 253 || !hostnameRE.MatchString(s.Hostname) {
		return fmt.Errorf("first-boot seed: hostname %q: expected RFC 1123 labels (letters, digits, '-')", s.Hostname)
	}
	u, err := url.Parse(s.CallbackURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("first-boot seed: callback url %q: expected an absolute http(s) URL", s.CallbackURL)
	}
	if !tokenRE.MatchString(s.CallbackToken) {
		return fmt.Errorf("first-boot seed: callback token: expected a non-empty printable string without spaces")
	}
	return nil
}

// PhoneHomeURL is CallbackURL with the token added as ?token=.
func (s Seed) PhoneHomeURL() (string, error) {
	u, err := url.Parse(s.CallbackURL)
	if err != nil {
		return "", fmt.Errorf("first-boot seed: callback url: %w", err)
	}
	q := u.Query()
	q.Set("token", s.CallbackToken)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

type metaData struct {
	InstanceID    string `yaml:"instance-id"`
	LocalHostname string `yaml:"local-hostname"`
}

type phoneHome struct {
	URL   string `yaml:"url"`
	Post  string `yaml:"post"`
	Tries int    `yaml:"tries"`
}

type writeFile struct {
	Path        string `yaml:"path"`
	Content     string `yaml:"content"`
	Owner       string `yaml:"owner"`
	Permissions string `yaml:"permissions"`
}

type cloudConfig struct {
	Hostname   string      `yaml:"hostname"`
	PhoneHome  phoneHome   `yaml:"phone_home"`
	WriteFiles []writeFile `yaml:"write_files"`
}

type netMatch struct {
	Name string `yaml:"name"`
}

type ethernet struct {
	Match netMatch `yaml:"match"`
	DHCP4 bool     `yaml:"dhcp4"`
}

type networkConfig struct {
	Version   int                 `yaml:"version"`
	Ethernets map[string]ethernet `yaml:"ethernets"`
}

// Files renders meta-data, user-data and network-config.
func (s Seed) Files() (map[string][]byte, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	meta, err := marshal(metaData{InstanceID: s.InstanceID, LocalHostname: s.Hostname})
	if err != nil {
		return nil, fmt.Errorf("first-boot seed: meta-data: %w", err)
	}
	user, err := s.userData()
	if err != nil {
		return nil, err
	}
	// v2 config: DHCPv4 on every Ethernet whose kernel name starts with e
	// (eth0, eno1, enp1s0, ens3), whatever the install hardware names them.
	netcfg, err := marshal(networkConfig{Version: 2, Ethernets: map[string]ethernet{
		"all-ethernet": {Match: netMatch{Name: "e*"}, DHCP4: true},
	}})
	if err != nil {
		return nil, fmt.Errorf("first-boot seed: network-config: %w", err)
	}
	return map[string][]byte{"meta-data": meta, "user-data": user, "network-config": netcfg}, nil
}

func (s Seed) userData() ([]byte, error) {
	ph, err := s.PhoneHomeURL()
	if err != nil {
		return nil, err
	}
	var root yaml.Node
	if err := root.Encode(cloudConfig{
		Hostname:  s.Hostname,
		PhoneHome: phoneHome{URL: ph, Post: "all", Tries: PhoneHomeTries},
		WriteFiles: []writeFile{{
			Path: TokenPath, Content: s.CallbackToken, Owner: "root:root", Permissions: "0600",
		}},
	}); err != nil {
		return nil, fmt.Errorf("first-boot seed: user-data: %w", err)
	}
	if strings.TrimSpace(s.ExtraUserData) != "" {
		extra, err := parseExtra(s.ExtraUserData)
		if err != nil {
			return nil, err
		}
		ours := map[string]bool{}
		for i := 0; i < len(root.Content); i += 2 {
			ours[root.Content[i].Value] = true
		}
		for i := 0; i < len(extra.Content); i += 2 {
			k := extra.Content[i]
			if ours[k.Value] {
				return nil, fmt.Errorf("first-boot seed: extra user-data line %d: key %q conflicts with the generated user-data (which sets %s)",
					k.Line, k.Value, strings.Join(slices.Sorted(maps.Keys(ours)), ", "))
			}
		}
		root.Content = append(root.Content, extra.Content...)
	}
	body, err := marshal(&root)
	if err != nil {
		return nil, fmt.Errorf("first-boot seed: user-data: %w", err)
	}
	return append([]byte("#cloud-config\n"), body...), nil
}

// marshal encodes with the two-space indent cloud-init's own examples use.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// parseExtra returns the top-level mapping of the extra user-data,
// refusing anything else and keys repeated within it.
func parseExtra(src string) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		return nil, fmt.Errorf("first-boot seed: extra user-data: %w", err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return &yaml.Node{Kind: yaml.MappingNode}, nil // only comments
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("first-boot seed: extra user-data line %d: expected a mapping of cloud-config keys", m.Line)
	}
	if len(m.Content) == 0 {
		return m, nil
	}
	// The generated file carries its own #cloud-config header; a copied-in
	// one would end up in the middle of the document.
	for _, n := range []*yaml.Node{&doc, m, m.Content[0]} {
		if strings.TrimSpace(n.HeadComment) == "#cloud-config" {
			n.HeadComment = ""
		}
	}
	seen := map[string]int{}
	for i := 0; i < len(m.Content); i += 2 {
		k := m.Content[i]
		if prev, ok := seen[k.Value]; ok {
			return nil, fmt.Errorf("first-boot seed: extra user-data line %d: key %q repeats line %d", k.Line, k.Value, prev)
		}
		seen[k.Value] = k.Line
	}
	return m, nil
}
