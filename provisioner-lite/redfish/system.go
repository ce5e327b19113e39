package redfish

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// systemDoc is what the pipeline's repeated calls (power state polls,
// power actions, boot override reads and sets) use of the ComputerSystem,
// decoded once from a pooled buffer. gofish decoded the whole schema (a
// few hundred fields and links), kept a copy of the body, and the driver
// then decoded that copy again for Boot and for the reset action: most of
// the client's allocations on the calls a fleet makes most.
type systemDoc struct {
	ODataID      string `json:"@odata.id"`
	ETag         string `json:"@odata.etag"`
	ID           string `json:"Id"`
	Manufacturer string
	PowerState   string
	// Boot and Actions are decoded when asked for: a power state poll
	// needs neither.
	Boot    json.RawMessage
	Actions json.RawMessage
}

// resetAction is #ComputerSystem.Reset: its target and where the allowed
// ResetType values are (inline, or an ActionInfo to read).
type resetAction struct {
	Target     string    `json:"target"`
	Allowed    allowList `json:"ResetType@Redfish.AllowableValues"`
	ActionInfo string    `json:"@Redfish.ActionInfo"`
}

// bootDoc is the Boot object. Values of the wrong type read as absent
// values (a vendor's null or number must not make the system unreadable);
// the allowable lists are read tolerantly (allowList).
type bootDoc struct {
	Target         optString `json:"BootSourceOverrideTarget"`
	Enabled        optString `json:"BootSourceOverrideEnabled"`
	Mode           optString `json:"BootSourceOverrideMode"`
	HTTPBootURI    optString `json:"HttpBootUri"`
	AllowedTargets allowList `json:"BootSourceOverrideTarget@Redfish.AllowableValues"`
	AllowedEnabled allowList `json:"BootSourceOverrideEnabled@Redfish.AllowableValues"`
	AllowedModes   allowList `json:"BootSourceOverrideMode@Redfish.AllowableValues"`
}

// optString is a property that may be absent, null or not a string:
// Set says it was there at all, V holds it when it is a string.
type optString struct {
	V   string
	Set bool
}

func (o *optString) UnmarshalJSON(b []byte) error {
	o.Set = true
	if len(b) > 0 && b[0] == '"' {
		_ = json.Unmarshal(b, &o.V) // a bad escape: leave it empty
	}
	return nil
}

func (d *bootDoc) state() bootState {
	return bootState{
		Target: d.Target.V, Enabled: d.Enabled.V, Mode: d.Mode.V, HasMode: d.Mode.Set,
		HTTPBootURI: d.HTTPBootURI.V, HasHTTPBootURI: d.HTTPBootURI.Set,
		AllowedTargets: d.AllowedTargets, AllowedEnabled: d.AllowedEnabled, AllowedModes: d.AllowedModes,
	}
}

// bootState is the system's Boot object, or an error saying it has none.
func (d *systemDoc) bootState() (bootState, error) {
	if len(d.Boot) == 0 || string(d.Boot) == "null" {
		return bootState{}, fmt.Errorf("ComputerSystem has no Boot object: the BMC cannot override boot")
	}
	var b bootDoc
	if err := json.Unmarshal(d.Boot, &b); err != nil {
		return bootState{}, fmt.Errorf("parse ComputerSystem Boot: %w", err)
	}
	return b.state(), nil
}

// resetAction is the #ComputerSystem.Reset action; nil where the system
// has none.
func (d *systemDoc) resetAction() (*resetAction, error) {
	if len(d.Actions) == 0 {
		return nil, nil
	}
	var a struct {
		Reset *resetAction `json:"#ComputerSystem.Reset"`
	}
	if err := json.Unmarshal(d.Actions, &a); err != nil {
		return nil, fmt.Errorf("parse ComputerSystem Actions: %w", err)
	}
	return a.Reset, nil
}

// resetTarget is the #ComputerSystem.Reset target, a path on the BMC.
func (d *systemDoc) resetTarget() (string, error) {
	ra, err := d.resetAction()
	if err != nil {
		return "", err
	}
	if ra == nil || ra.Target == "" {
		return "", fmt.Errorf("%w: no #ComputerSystem.Reset action", ErrNotSupported)
	}
	p, err := bmcPath(ra.Target)
	if err != nil {
		return "", fmt.Errorf("#ComputerSystem.Reset target: %w", err)
	}
	return p, nil
}

// parseSystemDoc decodes a ComputerSystem body.
func parseSystemDoc(raw []byte) (*systemDoc, error) {
	var d systemDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("parse ComputerSystem body: %w", err)
	}
	return &d, nil
}

// bodyPool holds the buffers the system's body is read into: a body is a
// few kilobytes, read on every poll.
var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody keeps a buffer a hostile or huge answer grew out of the pool.
const maxPooledBody = 256 << 10

// readSystem reads the ComputerSystem into a systemDoc.
func (c *Client) readSystem(api *gofish.APIClient) (*systemDoc, error) {
	buf := bodyPool.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			buf.Reset()
			bodyPool.Put(buf)
		}
	}()
	uri, etag, err := c.fetchSystem(api, buf)
	if err != nil {
		return nil, err
	}
	d, err := parseSystemDoc(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("system %s: %w", uri, err)
	}
	if d.ETag == "" {
		d.ETag = etag
	}
	if d.ODataID == "" {
		d.ODataID = uri
	}
	return d, nil
}

// systemRaw is the ComputerSystem's body, for the calls that read a link
// or two out of it (Bios, LogServices, Chassis), without gofish's decode.
func (c *Client) systemRaw(api *gofish.APIClient) (raw []byte, uri string, err error) {
	var buf bytes.Buffer
	uri, _, err = c.fetchSystem(api, &buf)
	return buf.Bytes(), uri, err
}

// fetchSystem reads the ComputerSystem's body into buf and says where it
// is and its ETag from the header (the body's @odata.etag comes first).
// The first read, no URI known yet, goes through system, which finds it.
func (c *Client) fetchSystem(api *gofish.APIClient, buf *bytes.Buffer) (uri, etag string, err error) {
	c.mu.Lock()
	uri = c.sysURI
	c.mu.Unlock()
	if uri == "" {
		sys, err := c.system(api)
		if err != nil {
			return "", "", err
		}
		buf.Write(sys.RawData)
		return sys.ODataID, sys.ODataEtag, nil
	}
	resp, err := api.Get(uri)
	if err != nil {
		return "", "", err // gofish's error: its status decides re-login
	}
	defer resp.Body.Close()
	if _, err := buf.ReadFrom(resp.Body); err != nil { // bounded by the transport
		return "", "", fmt.Errorf("GET %s: reading body: %w", uri, err)
	}
	// As gofish does: without the suffix a compressing proxy adds.
	etag = resp.Header.Get("ETag")
	if t, ok := strings.CutSuffix(etag, `-gzip"`); ok {
		etag = t + `"`
	}
	return uri, etag, nil
}

// resetTypes lists the ResetType values the system allows: inline, or
// from the reset action's ActionInfo.
func (c *Client) resetTypes(api *gofish.APIClient, d *systemDoc) ([]string, error) {
	ra, err := d.resetAction()
	if err != nil || ra == nil {
		return nil, err
	}
	if len(ra.Allowed) > 0 || ra.ActionInfo == "" {
		return ra.Allowed, nil
	}
	p, err := bmcPath(ra.ActionInfo)
	if err != nil {
		return nil, fmt.Errorf("reset ActionInfo: %w", err)
	}
	var info struct {
		Parameters []struct {
			Name, DataType  string
			AllowableValues allowList
		}
	}
	if _, err := getJSON(api, p, &info); err != nil {
		return nil, err
	}
	for _, prm := range info.Parameters {
		if prm.Name == "ResetType" && (prm.DataType == "" || prm.DataType == string(schemas.StringParameterTypes)) {
			return prm.AllowableValues, nil
		}
	}
	return nil, errors.New("reset ActionInfo " + p + " has no ResetType parameter")
}
