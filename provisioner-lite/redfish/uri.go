package redfish

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// maxURILen bounds a URI the BMC sends; real ones are far shorter.
const maxURILen = 2048

// bmcPath turns a URI the BMC sent (@odata.id, Location, TaskMonitor, an
// action target) into a path on that same BMC. The driver and gofish build
// request URLs as endpoint + URI, so anything but an absolute path would
// move the request (and its credentials) elsewhere: "0" onto another port,
// "@evil.example/x" or ".evil.example/x" onto another host. An absolute
// http(s) URL gives its path: the request still goes to the BMC we know.
func bmcPath(uri string) (string, error) {
	if uri == "" {
		return "", errors.New("empty URI")
	}
	if len(uri) > maxURILen {
		return "", fmt.Errorf("URI of %d bytes (limit %d)", len(uri), maxURILen)
	}
	u, err := url.Parse(uri)
	if err != nil {
		return "", fmt.Errorf("URI %q: %w", uri, err)
	}
	switch {
	case u.Opaque != "" || (u.Scheme != "" && u.Scheme != "http" && u.Scheme != "https"):
		return "", fmt.Errorf("URI %q: want a path on the BMC or an http(s) URL", uri)
	case u.Scheme == "" && u.Host == "" && !strings.HasPrefix(uri, "/"):
		return "", fmt.Errorf("URI %q: relative: want a path starting with /", uri)
	case !strings.HasPrefix(u.Path, "/"):
		return "", fmt.Errorf("URI %q: no path", uri)
	}
	p := u.EscapedPath()
	// "//x" on its own reads as a host: keep one slash, so the path means
	// the same wherever it is used again ("https://h//0//" gives "/0//").
	if strings.HasPrefix(p, "//") {
		p = "/" + strings.TrimLeft(p, "/")
	}
	if u.RawQuery != "" {
		p += "?" + u.RawQuery
	}
	return p, nil
}

// optPath is bmcPath for an optional link: "" stays "", and a link that is
// not a path on the BMC is an error naming what it was.
func optPath(what, uri string) (string, error) {
	if uri == "" {
		return "", nil
	}
	p, err := bmcPath(uri)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return p, nil
}

// maxMembers bounds the collection members read (a TaskService keeps a few
// hundred tasks at most).
const maxMembers = 4096

// parseMembers reads a collection's member links; links that are not paths
// on the BMC are left out.
func parseMembers(raw []byte) ([]string, error) {
	var coll struct {
		Members []struct {
			ID string `json:"@odata.id"`
		}
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &coll); err != nil {
			return nil, fmt.Errorf("parse collection: %w", err)
		}
	}
	if len(coll.Members) > maxMembers {
		return nil, fmt.Errorf("collection lists %d members (limit %d)", len(coll.Members), maxMembers)
	}
	uris := []string{}
	for _, m := range coll.Members {
		if p, err := bmcPath(m.ID); err == nil {
			uris = append(uris, p)
		}
	}
	return uris, nil
}
