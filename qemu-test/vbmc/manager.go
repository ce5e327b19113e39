package vbmc

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

const managerURL = odataRoot + "/Managers/BMC"

// managerResets are the #Manager.Reset types (the mockup's).
var managerResets = []string{"ForceRestart", "GracefulRestart"}

// BMCResets counts accepted #Manager.Reset requests.
func (b *BMC) BMCResets() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bmcResets
}

// Resetting reports whether the BMC is rebooting (unreachable).
func (b *BMC) Resetting() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.resetting
}

// setReachHook lets a Server close and reopen its listener around a BMC
// reset, so clients see "connection refused" rather than 503.
func (b *BMC) setReachHook(fn func(up bool)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reach = fn
}

func (b *BMC) serveManager(w http.ResponseWriter) {
	var obj map[string]any
	if err := json.Unmarshal(b.tree[managerURL].body, &obj); err != nil {
		writeError(w, http.StatusInternalServerError, "InternalError", "mockup Manager unreadable: "+err.Error())
		return
	}
	b.mu.Lock()
	for _, f := range b.fw {
		if f.spec.Kind == KindBMC {
			obj["FirmwareVersion"] = f.active
			break
		}
	}
	b.mu.Unlock()
	obj["DateTime"] = b.cfg.Now().Format(time.RFC3339)
	obj["Actions"] = map[string]any{"#Manager.Reset": map[string]any{
		"target":                            managerURL + "/Actions/Manager.Reset",
		"ResetType@Redfish.AllowableValues": managerResets,
	}}
	delete(obj, "@Redfish.Copyright")
	writeJSON(w, http.StatusOK, obj)
}

// postManagerReset answers first and then goes away, as a BMC does: every
// session dies, requests get 503 (or connection refused) for the reset
// time, and staged BMC firmware is running when it returns.
func (b *BMC) postManagerReset(w http.ResponseWriter, r *http.Request) {
	var req struct{ ResetType *string }
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "MalformedJSON", fmt.Sprintf("The request body submitted was malformed JSON: %v", err))
		return
	}
	rt := "GracefulRestart" // DSP2046: ResetType is optional for Manager.Reset
	if req.ResetType != nil {
		rt = *req.ResetType
	}
	if !slices.Contains(managerResets, rt) {
		writeError(w, http.StatusBadRequest, "ActionParameterValueNotInList",
			fmt.Sprintf("The value %s for the parameter ResetType in the action Manager.Reset is not in the list of acceptable values %v.", rt, managerResets))
		return
	}
	b.mu.Lock()
	b.logLocked(Event{Severity: "OK", Message: fmt.Sprintf("The BMC is resetting (%s).", rt), MessageID: MsgManagerReset,
		MessageArgs: []string{rt}, SensorType: "Management Subsystem Health", EntryCode: "Assert"})
	b.resetting = true
	b.bmcResets++
	clear(b.sessions) // a rebooted BMC remembers no session
	d := b.cfg.ResetDuration
	if b.slowReturn > 0 {
		d, b.slowReturn = b.slowReturn, 0
	}
	reach := b.reach
	b.mu.Unlock()
	if b.cfg.ResetRefuse && reach == nil {
		b.log.Warn("ResetRefuse needs a Server (Listen); answering 503 during the reset instead")
	}
	b.log.Info("BMC reset", "type", rt, "away", d)
	b.wg.Add(1)
	go b.bmcReboot(d, reach)
	w.WriteHeader(http.StatusNoContent)
}

func (b *BMC) bmcReboot(d time.Duration, reach func(bool)) {
	defer b.wg.Done()
	refuse := b.cfg.ResetRefuse && reach != nil
	sleep := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-b.done:
			return false
		}
	}
	if refuse {
		// Let the 204 reach the client before the connections drop.
		if !sleep(100 * time.Millisecond) {
			return
		}
		reach(false)
	}
	if !sleep(d) {
		return
	}
	b.mu.Lock()
	b.activateLocked(KindBMC)
	clear(b.sessions) // sessions made during the shutdown race die too
	b.resetting = false
	b.mu.Unlock()
	if refuse {
		reach(true)
	}
	b.log.Info("BMC back after reset")
}
