package vbmc

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// The DMTF public-rackmount1 mockup: a static tree of index.json files laid
// out by resource path. The BMC serves it as the read-only backdrop and
// renders the resources it keeps live state for (system, sessions) itself.
//
//go:embed mockups/public-rackmount1
var mockupFS embed.FS

const (
	mockupRoot     = "mockups/public-rackmount1"
	mockupSystemID = "437XR1138R2"
	// mockupNIC is the system's first physical NIC; its MAC becomes the node's.
	mockupNIC = "12446A3B0411"
	odataRoot = "/redfish/v1"
)

type resource struct {
	body        []byte
	contentType string
}

// loadTree maps URL paths (no trailing slash) to resource bodies, with the
// system's @odata.id rewritten to systemID and the first NIC's MAC set.
func loadTree(systemID, mac string) (map[string]resource, error) {
	tree := make(map[string]resource)
	err := fs.WalkDir(mockupFS, mockupRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel := strings.TrimPrefix(p, mockupRoot)
		var url, ctype string
		switch path.Base(rel) {
		case "index.json":
			url, ctype = odataRoot+path.Dir(rel), "application/json; charset=utf-8"
		case "index.xml":
			url, ctype = odataRoot+path.Dir(rel), "application/xml"
		default:
			return nil // explorer config, raw registry copies: not resources
		}
		url = strings.TrimSuffix(url, "/")
		b, err := mockupFS.ReadFile(p)
		if err != nil {
			return fmt.Errorf("read embedded mockup %s: %w", p, err)
		}
		if systemID != mockupSystemID {
			b = []byte(strings.ReplaceAll(string(b),
				odataRoot+"/Systems/"+mockupSystemID, odataRoot+"/Systems/"+systemID))
		}
		tree[url] = resource{body: b, contentType: ctype}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load mockup %s: %w", mockupRoot, err)
	}
	if _, ok := tree[odataRoot]; !ok {
		return nil, fmt.Errorf("load mockup %s: no service root index.json", mockupRoot)
	}
	if mac != "" {
		nic := odataRoot + "/Systems/" + systemID + "/EthernetInterfaces/" + mockupNIC
		r, ok := tree[nic]
		if !ok {
			return nil, fmt.Errorf("load mockup: expected NIC resource %s", nic)
		}
		var obj map[string]any
		if err := json.Unmarshal(r.body, &obj); err != nil {
			return nil, fmt.Errorf("parse mockup %s: %w", nic, err)
		}
		obj["MACAddress"] = mac
		obj["PermanentMACAddress"] = mac
		r.body, _ = json.MarshalIndent(obj, "", "    ")
		tree[nic] = r
	}
	return tree, nil
}

// mockupSystem returns the mockup ComputerSystem body, rewritten for systemID.
func mockupSystem(tree map[string]resource, systemID string) (map[string]any, error) {
	u := odataRoot + "/Systems/" + systemID
	r, ok := tree[u]
	if !ok {
		return nil, fmt.Errorf("mockup has no system at %s", u)
	}
	var obj map[string]any
	if err := json.Unmarshal(r.body, &obj); err != nil {
		return nil, fmt.Errorf("parse mockup system %s: %w", u, err)
	}
	return obj, nil
}
