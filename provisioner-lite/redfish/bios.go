package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/stmcginnis/gofish"
)

// biosDoc is the part of a Bios resource the driver reads.
type biosDoc struct {
	ODataID    string `json:"@odata.id"`
	ODataEtag  string `json:"@odata.etag"`
	Attributes map[string]any
	Settings   *biosSettings `json:"@Redfish.Settings"`
	// selfSettings: the BMC publishes no settings object; changes are
	// PATCHed on the Bios resource itself.
	selfSettings bool
}

type biosSettings struct {
	ETag           string
	SettingsObject struct {
		ID string `json:"@odata.id"`
	}
	SupportedApplyTimes []string
}

// oemSettingsLink finds a settings object published under Oem instead of
// @Redfish.Settings: Oem.<vendor>.Links.Settings or
// Oem.<vendor>.SettingsObject, any vendor key.
func oemSettingsLink(raw []byte) string {
	var doc struct {
		Oem map[string]struct {
			Links struct {
				Settings struct {
					ID string `json:"@odata.id"`
					// HPE iLO 4 writes "href".
					Href string `json:"href"`
				}
			}
			SettingsObject struct {
				ID string `json:"@odata.id"`
			}
		}
	}
	if json.Unmarshal(raw, &doc) != nil {
		return ""
	}
	for _, k := range slices.Sorted(maps.Keys(doc.Oem)) {
		o := doc.Oem[k]
		for _, l := range []string{o.Links.Settings.ID, o.Links.Settings.Href, o.SettingsObject.ID} {
			if l != "" {
				return l
			}
		}
	}
	return ""
}

// bios reads the system's Bios resource.
func (c *Client) bios(api *gofish.APIClient) (*biosDoc, error) {
	sysRaw, sysURI, err := c.systemRaw(api)
	if err != nil {
		return nil, err
	}
	link, err := parseBiosLink(sysRaw)
	if err != nil {
		return nil, fmt.Errorf("system %s: %w", sysURI, err)
	}
	var raw json.RawMessage
	if _, err := getJSON(api, link, &raw); err != nil {
		return nil, err
	}
	doc, err := parseBios(raw)
	if err != nil {
		return nil, fmt.Errorf("Bios %s: %w", link, err)
	}
	if doc.ODataID == "" {
		doc.ODataID = link
	}
	if doc.Settings == nil {
		doc.Settings = &biosSettings{}
		doc.Settings.SettingsObject.ID, doc.selfSettings = link, true
	}
	return doc, nil
}

// parseBiosLink finds the Bios resource a ComputerSystem links.
func parseBiosLink(raw []byte) (string, error) {
	var link struct {
		Bios struct {
			ID string `json:"@odata.id"`
		}
	}
	if err := json.Unmarshal(raw, &link); err != nil || link.Bios.ID == "" {
		return "", fmt.Errorf("%w: links no Bios resource", ErrNotSupported)
	}
	p, err := bmcPath(link.Bios.ID)
	if err != nil {
		return "", fmt.Errorf("Bios link: %w", err)
	}
	return p, nil
}

// parseBios reads a Bios resource (or its Settings object); the settings
// link, where given, must be a path on the BMC.
func parseBios(raw []byte) (*biosDoc, error) {
	var doc biosDoc
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, fmt.Errorf("parse: %w", err)
		}
	}
	doc.ODataID, _ = bmcPath(doc.ODataID) // only named in messages and as the fallback settings target
	if doc.Settings == nil || doc.Settings.SettingsObject.ID == "" {
		// No @Redfish.Settings: the vendor's documented ways, in order,
		// are an Oem settings link (HPE iLO 4's Oem.Hp.Links.Settings,
		// Oem.Hpe.Links.Settings) and PATCH on the Bios resource itself
		// (sushy's fallback; BMCs that apply at reset without a separate
		// object). selfSettings marks the latter: pending values are not
		// observable there.
		if link := oemSettingsLink(raw); link != "" {
			doc.Settings = &biosSettings{}
			doc.Settings.SettingsObject.ID = link
		} else if doc.ODataID != "" {
			doc.Settings = &biosSettings{}
			doc.Settings.SettingsObject.ID = doc.ODataID
			doc.selfSettings = true
		}
	}
	if s := doc.Settings; s != nil && s.SettingsObject.ID != "" {
		p, err := bmcPath(s.SettingsObject.ID)
		if err != nil {
			return nil, fmt.Errorf("@Redfish.Settings SettingsObject: %w", err)
		}
		s.SettingsObject.ID = p
	}
	return &doc, nil
}

// BiosAttributes returns the BIOS attributes in effect.
func (c *Client) BiosAttributes(ctx context.Context) (map[string]any, error) {
	var attrs map[string]any
	err := c.call(ctx, "read BIOS attributes", func(api *gofish.APIClient) error {
		doc, err := c.bios(api)
		if err != nil {
			return err
		}
		attrs = doc.Attributes
		return nil
	})
	return attrs, err
}

// PendingBiosAttributes returns the attributes staged in the Settings
// object that differ from those in effect (what the next boot applies).
// BMCs that list every attribute there and those that list only the
// pending ones read the same.
func (c *Client) PendingBiosAttributes(ctx context.Context) (map[string]any, error) {
	var pending map[string]any
	err := c.call(ctx, "read pending BIOS attributes", func(api *gofish.APIClient) error {
		doc, err := c.bios(api)
		if err != nil {
			return err
		}
		if doc.Settings == nil || doc.Settings.SettingsObject.ID == "" {
			return fmt.Errorf("%w: Bios %s has no @Redfish.Settings object", ErrNotSupported, doc.ODataID)
		}
		if doc.selfSettings {
			return fmt.Errorf("%w: Bios %s has no settings object: pending values are not observable", ErrNotSupported, doc.ODataID)
		}
		var st biosDoc
		if _, err := getJSON(api, doc.Settings.SettingsObject.ID, &st); err != nil {
			return err
		}
		pending, _ = PlanBios(doc.Attributes, st.Attributes)
		return nil
	})
	return pending, err
}

// SetBiosAttributes stages attrs (only these keys: plan with PlanBios
// first) in the Bios @Redfish.Settings object to apply OnReset, with
// If-Match when the BMC gives an ETag, then checks they read back as
// pending. The host must reboot for them to take effect.
func (c *Client) SetBiosAttributes(ctx context.Context, attrs map[string]any) error {
	if len(attrs) == 0 {
		return nil
	}
	var settingsURI, etag string
	var applyTimes []string
	self := false
	read := func() error {
		return c.call(ctx, "read BIOS settings object", func(api *gofish.APIClient) error {
			doc, err := c.bios(api)
			if err != nil {
				return err
			}
			if doc.Settings == nil || doc.Settings.SettingsObject.ID == "" {
				return fmt.Errorf("%w: Bios %s has no @Redfish.Settings object", ErrNotSupported, doc.ODataID)
			}
			settingsURI, applyTimes, self = doc.Settings.SettingsObject.ID, doc.Settings.SupportedApplyTimes, doc.selfSettings
			var st biosDoc
			resp, err := getJSON(api, settingsURI, &st)
			if err != nil {
				return err
			}
			etag = resp.Header.Get("ETag")
			if etag == "" {
				etag = st.ODataEtag
			}
			if etag == "" {
				etag = doc.Settings.ETag
			}
			return nil
		})
	}
	body := map[string]any{"Attributes": attrs}
	var err error
	for round := 0; round < 2; round++ {
		if err = read(); err != nil {
			return err
		}
		if len(applyTimes) > 0 {
			if !slices.Contains(applyTimes, "OnReset") {
				return fmt.Errorf("redfish %s: %w: BIOS settings apply times %v lack OnReset", c.ep.URL, ErrNotSupported, applyTimes)
			}
			body["@Redfish.SettingsApplyTime"] = map[string]any{"ApplyTime": "OnReset"}
		}
		headers := map[string]string{}
		if etag != "" {
			headers["If-Match"] = etag
		}
		_, err = c.mutate(ctx, "PATCH BIOS settings", settingsURI, nil, false, func(api *gofish.APIClient) (*http.Response, error) {
			return api.PatchWithHeaders(settingsURI, body, headers)
		})
		if statusOf(err) != http.StatusPreconditionFailed {
			break
		}
		c.log.Info("BIOS settings changed under us (412); re-reading", "settings", settingsURI)
	}
	if err != nil {
		return fmt.Errorf("redfish %s: stage BIOS attributes %v at %s: %w", c.ep.URL, slices.Sorted(maps.Keys(attrs)), settingsURI, err)
	}
	pending := map[string]any{}
	if !self {
		if pending, err = c.PendingBiosAttributes(ctx); err != nil {
			return fmt.Errorf("redfish %s: verify staged BIOS attributes: %w", c.ep.URL, err)
		}
	}
	current, err := c.BiosAttributes(ctx)
	if err != nil {
		return fmt.Errorf("redfish %s: verify staged BIOS attributes: %w", c.ep.URL, err)
	}
	var missing []string
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		p, staged := pending[k]
		if staged && valuesEqual(p, attrs[k]) {
			continue
		}
		if !staged && valuesEqual(current[k], attrs[k]) {
			continue // some BMCs apply a no-op at once
		}
		missing = append(missing, fmt.Sprintf("%s: asked %v, pending %v", k, attrs[k], p))
	}
	if len(missing) > 0 && self {
		// Nothing shows pending values on such a BMC: the BIOS phase
		// verifies them after the next boot.
		c.log.Info("BIOS attributes PATCHed on the Bios resource (no settings object); they show after the next boot", "bios", settingsURI, "attributes", attrs)
		return nil
	}
	if len(missing) > 0 {
		return fmt.Errorf("redfish %s: BMC accepted the BIOS PATCH but does not show it pending: %s", c.ep.URL, strings.Join(missing, "; "))
	}
	c.log.Info("BIOS attributes staged for the next boot", "attributes", attrs)
	return nil
}

// PlanBios compares desired attributes with current ones: changes holds
// only those that differ (or that current lacks, which the BMC will judge),
// matches the names already right. Numbers compare by value whatever their
// Go type (YAML int vs JSON float64).
func PlanBios(current, desired map[string]any) (changes map[string]any, matches []string) {
	changes = map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(desired)) {
		if cur, ok := current[k]; ok && valuesEqual(cur, desired[k]) {
			matches = append(matches, k)
			continue
		}
		changes[k] = desired[k]
	}
	return changes, matches
}

func valuesEqual(a, b any) bool {
	na, aNum := number(a)
	nb, bNum := number(b)
	if aNum || bNum {
		return aNum && bNum && na == nb
	}
	return reflect.DeepEqual(a, b)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int8:
		return float64(n), true
	case int16:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint:
		return float64(n), true
	case uint8:
		return float64(n), true
	case uint16:
		return float64(n), true
	case uint32:
		return float64(n), true
	case uint64:
		return float64(n), true
	case float32:
		return float64(n), true
	case float64:
		return n, true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}
