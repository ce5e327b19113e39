package cidata

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"
)

// Seed is the part of a NoCloud seed the host OS acts on.
type Seed struct {
	InstanceID string
	Hostname   string
	PhoneHome  PhoneHome
}

// PhoneHome is cloud-init's phone_home module configuration.
type PhoneHome struct {
	URL   string    `yaml:"url"`
	Post  yaml.Node `yaml:"post"` // "all" or a list of keys
	Tries int       `yaml:"tries"`
}

// Token is the callback token carried in the URL's token query parameter.
func (p PhoneHome) Token() string {
	u, err := url.Parse(p.URL)
	if err != nil {
		return ""
	}
	return u.Query().Get("token")
}

type metaData struct {
	InstanceID    string `yaml:"instance-id"`
	LocalHostname string `yaml:"local-hostname"`
}

type userData struct {
	Hostname  string     `yaml:"hostname"`
	PhoneHome *PhoneHome `yaml:"phone_home"`
}

// ReadSeed reads meta-data and user-data from a mounted seed directory.
func ReadSeed(dir string) (*Seed, error) {
	mdPath, udPath := filepath.Join(dir, "meta-data"), filepath.Join(dir, "user-data")
	md, err := os.ReadFile(mdPath)
	if err != nil {
		return nil, fmt.Errorf("reading NoCloud meta-data: %w", err)
	}
	ud, err := os.ReadFile(udPath)
	if err != nil {
		return nil, fmt.Errorf("reading NoCloud user-data: %w", err)
	}
	return ParseSeed(mdPath, md, udPath, ud)
}

// ParseSeed parses the two seed files; names are used in errors.
func ParseSeed(mdName string, md []byte, udName string, ud []byte) (*Seed, error) {
	var m metaData
	if err := yaml.Unmarshal(trimBOM(md), &m); err != nil {
		return nil, fmt.Errorf("%s: %w", mdName, err)
	}
	if m.InstanceID == "" {
		return nil, fmt.Errorf("%s: instance-id: required, found none", mdName)
	}
	ud = trimBOM(ud)
	if !bytes.HasPrefix(ud, []byte("#cloud-config")) {
		return nil, fmt.Errorf("%s: expected a #cloud-config document, first line is %q", udName, firstLine(ud))
	}
	var u userData
	if err := yaml.Unmarshal(ud, &u); err != nil {
		return nil, fmt.Errorf("%s: %w", udName, err)
	}
	if u.PhoneHome == nil || u.PhoneHome.URL == "" {
		return nil, fmt.Errorf("%s: phone_home.url: required, found none", udName)
	}
	pu, err := url.Parse(u.PhoneHome.URL)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return nil, fmt.Errorf("%s: phone_home.url: %q is not an http(s) URL", udName, u.PhoneHome.URL)
	}
	s := &Seed{InstanceID: m.InstanceID, Hostname: u.Hostname, PhoneHome: *u.PhoneHome}
	if s.Hostname == "" {
		s.Hostname = m.LocalHostname
	}
	if s.PhoneHome.Tries <= 0 {
		s.PhoneHome.Tries = 10 // cloud-init's default
	}
	return s, nil
}

func firstLine(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	if len(b) > 40 {
		b = b[:40]
	}
	return string(b)
}
