package vbmc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// TaskShape selects how an accepted update answers, since BMCs differ and
// the driver must handle each.
type TaskShape string

const (
	// ShapeMonitor: 202 with Location = a task monitor URI (DSP0266); the
	// monitor answers 202 while running, the Task once when done, then 404.
	ShapeMonitor TaskShape = ""
	// ShapeTaskLocation: 202 with Location = the Task resource itself.
	ShapeTaskLocation TaskShape = "task-location"
	// ShapeTaskBody: 202 with no Location and the Task in the body.
	ShapeTaskBody TaskShape = "task-body"
)

const (
	updateServiceURL = odataRoot + "/UpdateService"
	simpleUpdateURL  = updateServiceURL + "/Actions/UpdateService.SimpleUpdate"
	simpleUpdateInfo = updateServiceURL + "/SimpleUpdateActionInfo"
	multipartURL     = updateServiceURL + "/update-multipart"
	inventoryURL     = updateServiceURL + "/FirmwareInventory"
	tasksURL         = odataRoot + "/TaskService/Tasks"
	monitorsURL      = odataRoot + "/TaskService/TaskMonitors"
)

// implementedProtocols are the SimpleUpdate transfer protocols the BMC can
// really fetch with.
var implementedProtocols = []string{"HTTP", "HTTPS"}

// Task states as Redfish spells them.
const (
	taskRunning   = "Running"
	taskCompleted = "Completed"
	taskException = "Exception"
)

type task struct {
	ID         string
	Op         string // SimpleUpdate, MultipartPush
	TargetURI  string // the URI the request was sent to (Task.Payload)
	State      string
	Status     string // OK, Warning, Critical
	Messages   []string
	Start, End time.Time
	duration   time.Duration
	monitorHit bool // the completed monitor was read once; 404 from now on
}

func (t *task) done() bool { return t.State == taskCompleted || t.State == taskException }

// Tasks returns the state of every task, oldest first (for tests).
func (b *BMC) Tasks() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, t := range b.tasks {
		out = append(out, t.ID+":"+t.State)
	}
	return out
}

func (b *BMC) serveUpdateService(w http.ResponseWriter) {
	var obj map[string]any
	if err := json.Unmarshal(b.tree[updateServiceURL].body, &obj); err != nil {
		writeError(w, http.StatusInternalServerError, "InternalError", "mockup UpdateService unreadable: "+err.Error())
		return
	}
	// The mockup's unstructured HttpPushUri is not implemented here.
	delete(obj, "HttpPushUri")
	delete(obj, "HttpPushUriOptions")
	delete(obj, "HttpPushUriOptionsBusy")
	if !b.cfg.NoMultipart {
		obj["MultipartHttpPushUri"] = multipartURL
	}
	obj["Actions"] = map[string]any{
		"#UpdateService.SimpleUpdate": map[string]any{
			"target":              simpleUpdateURL,
			"@Redfish.ActionInfo": simpleUpdateInfo,
			"TransferProtocol@Redfish.AllowableValues": b.servedProtocols(),
		},
	}
	writeJSON(w, http.StatusOK, obj)
}

// servedProtocols is protocols as the vendor writes it (NestedAllowableValues:
// an array of arrays, as one published UpdateService does).
func (b *BMC) servedProtocols() any {
	if b.cfg.NestedAllowableValues {
		return [][]string{b.protocols()}
	}
	return b.protocols()
}

func (b *BMC) protocols() []string {
	if len(b.cfg.TransferProtocols) > 0 {
		return slices.Clone(b.cfg.TransferProtocols)
	}
	return slices.Clone(implementedProtocols)
}

func (b *BMC) serveSimpleUpdateInfo(w http.ResponseWriter) {
	writeJSON(w, http.StatusOK, map[string]any{
		"@odata.type": "#ActionInfo.v1_5_0.ActionInfo",
		"@odata.id":   simpleUpdateInfo,
		"Id":          "SimpleUpdateActionInfo",
		"Name":        "Simple Update Action Info",
		"Parameters": []map[string]any{
			{"Name": "ImageURI", "Required": true, "DataType": "String"},
			{"Name": "TransferProtocol", "Required": false, "DataType": "String", "AllowableValues": b.servedProtocols()},
			{"Name": "Targets", "Required": false, "DataType": "StringArray"},
			{"Name": "Username", "Required": false, "DataType": "String"},
			{"Name": "Password", "Required": false, "DataType": "String"},
		},
	})
}

// serveInventory serves the FirmwareInventory collection (id ""), its
// members expanded in place when asked with $expand, or one member.
func (b *BMC) serveInventory(w http.ResponseWriter, id string, expand bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if id == "" {
		var ids []string
		for _, f := range b.fw {
			ids = append(ids, b.memberID(f))
			if p := b.previousID(f); p != "" {
				ids = append(ids, p)
			}
		}
		members := []any{}
		for _, m := range ids {
			if obj, ok := b.inventoryMember(m); expand && ok {
				members = append(members, obj)
				continue
			}
			members = append(members, map[string]string{"@odata.id": inventoryURL + "/" + m})
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"@odata.type":         "#SoftwareInventoryCollection.SoftwareInventoryCollection",
			"@odata.id":           inventoryURL,
			"Name":                "Firmware Collection",
			"Members":             members,
			"Members@odata.count": len(members),
		})
		return
	}
	obj, ok := b.inventoryMember(id)
	if !ok {
		writeError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s/%s was not found.", inventoryURL, id))
		return
	}
	writeJSON(w, http.StatusOK, obj)
}

// inventoryMember is member id's SoftwareInventory resource. b.mu is held.
func (b *BMC) inventoryMember(id string) (map[string]any, bool) {
	f, prev := b.fwByMemberID(id)
	if f == nil {
		return nil, false
	}
	obj := map[string]any{}
	if res, ok := b.tree[inventoryURL+"/"+f.spec.ID]; ok { // the mockup's own member: keep its details
		_ = json.Unmarshal(res.body, &obj)
	}
	obj["@odata.type"] = "#SoftwareInventory.v1_13_0.SoftwareInventory"
	obj["@odata.id"] = inventoryURL + "/" + id
	obj["Id"] = id
	obj["Name"] = f.spec.Name
	obj["Version"] = f.active
	obj["Updateable"] = f.spec.Updateable
	obj["SoftwareId"] = f.spec.SoftwareID
	obj["Status"] = map[string]any{"State": "Enabled", "Health": "OK"}
	if f.spec.Kind == KindBMC {
		obj["RelatedItem"] = []map[string]string{{"@odata.id": managerURL}}
	}
	delete(obj, "@Redfish.Copyright")
	if prev {
		obj["Version"] = f.previous
		obj["Updateable"] = false
		return obj, true
	}
	if f.pending != "" {
		// Real BMCs show staged images in vendor ways; this is ours.
		on := "HostReset"
		if f.spec.Kind == KindBMC {
			on = "ManagerReset"
		}
		obj["Oem"] = map[string]any{"CURE": map[string]any{"PendingVersion": f.pending, "ActivatesOn": on}}
	}
	return obj, true
}

// postSimpleUpdate validates the request synchronously (bad input is a
// 400, as on a real BMC) and fetches the image in the task.
func (b *BMC) postSimpleUpdate(w http.ResponseWriter, r *http.Request) {
	var body map[string]json.RawMessage
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "MalformedJSON", fmt.Sprintf("The request body submitted was malformed JSON: %v", err))
		return
	}
	var imageURI, proto string
	var targets []string
	for k, v := range body {
		var err error
		switch k {
		case "ImageURI":
			err = json.Unmarshal(v, &imageURI)
		case "TransferProtocol":
			err = json.Unmarshal(v, &proto)
		case "Targets":
			err = json.Unmarshal(v, &targets)
		case "Username", "Password", "@Redfish.OperationApplyTime":
		default:
			writeError(w, http.StatusBadRequest, "ActionParameterUnknown",
				fmt.Sprintf("The action UpdateService.SimpleUpdate was submitted with the invalid parameter %s.", k))
			return
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "ActionParameterValueTypeError",
				fmt.Sprintf("The value %s for the parameter %s in the action UpdateService.SimpleUpdate is of a different type than the parameter can accept.", v, k))
			return
		}
	}
	if imageURI == "" {
		writeError(w, http.StatusBadRequest, "ActionParameterMissing",
			"The action UpdateService.SimpleUpdate requires the parameter ImageURI to be present in the request body.")
		return
	}
	fetchURL, err := b.imageURL(imageURI, proto)
	if err != nil {
		writeError(w, http.StatusBadRequest, "ActionParameterNotSupported", err.Error())
		return
	}
	ids, ok := b.targetIDs(w, targets)
	if !ok {
		return
	}
	t := b.newTask("SimpleUpdate", simpleUpdateURL)
	b.log.Info("SimpleUpdate accepted", "task", t.ID, "image", fetchURL, "targets", ids)
	fetch := func(ctx context.Context) (PackageHeader, int64, error) { return b.fetchImage(ctx, fetchURL) }
	b.wg.Add(1)
	go b.runUpdate(t, fetch, ids)
	b.respondTask(w, t)
}

// imageURL combines ImageURI and TransferProtocol the way DSP0266 allows:
// the protocol in the URI scheme, in the parameter, or both (agreeing).
func (b *BMC) imageURL(imageURI, proto string) (string, error) {
	allowed := b.protocols()
	scheme := ""
	if i := strings.Index(imageURI, "://"); i > 0 {
		scheme = strings.ToUpper(imageURI[:i])
	}
	switch {
	case proto == "" && scheme == "":
		return "", fmt.Errorf("ImageURI %q has no scheme and TransferProtocol is missing (allowable: %v)", imageURI, allowed)
	case proto != "" && scheme != "" && proto != scheme:
		return "", fmt.Errorf("TransferProtocol %s disagrees with the ImageURI scheme of %q", proto, imageURI)
	case proto == "":
		proto = scheme
	}
	if !slices.Contains(allowed, proto) {
		return "", fmt.Errorf("The parameter TransferProtocol %s is not supported: allowable values are %v.", proto, allowed)
	}
	if scheme == "" {
		imageURI = strings.ToLower(proto) + "://" + imageURI
	}
	u, err := url.Parse(imageURI)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("ImageURI %q is not a URL with a host", imageURI)
	}
	return u.String(), nil
}

// targetIDs maps Targets URIs to inventory Ids, answering 400 for any
// that is not an updateable member.
func (b *BMC) targetIDs(w http.ResponseWriter, targets []string) ([]string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for _, t := range targets {
		id, ok := strings.CutPrefix(strings.TrimSuffix(t, "/"), inventoryURL+"/")
		f, prev := b.fwByMemberID(id)
		if !ok || f == nil || prev || !f.spec.Updateable {
			writeFieldErrors(w, http.StatusBadRequest, []fieldError{{id: "ActionParameterValueNotInList", prop: "Targets",
				msg: fmt.Sprintf("The value %s for the parameter Targets is not an updateable member of %s.", t, inventoryURL)}})
			return nil, false
		}
		ids = append(ids, f.spec.ID)
	}
	return ids, true
}

func (b *BMC) fetchImage(ctx context.Context, u string) (PackageHeader, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return PackageHeader{}, 0, fmt.Errorf("image %s: %w", u, err)
	}
	resp, err := b.fetcher.Do(req)
	if err != nil {
		return PackageHeader{}, 0, fmt.Errorf("download image %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return PackageHeader{}, 0, fmt.Errorf("download image %s: HTTP %s", u, resp.Status)
	}
	h, n, err := readPackage(resp.Body)
	if err != nil {
		return h, n, fmt.Errorf("image %s: %w", u, err)
	}
	return h, n, nil
}

// postMultipart receives a MultipartHttpPushUri upload, streaming the
// UpdateFile part through readPackage: the image is never held whole.
func (b *BMC) postMultipart(w http.ResponseWriter, r *http.Request) {
	mr, err := r.MultipartReader()
	if err != nil {
		writeError(w, http.StatusUnsupportedMediaType, "UnsupportedMediaType",
			fmt.Sprintf("The MultipartHttpPushUri takes multipart/form-data: %v", err))
		return
	}
	var params struct {
		Targets   []string
		ApplyTime string `json:"@Redfish.OperationApplyTime"`
	}
	var sawParams, sawFile bool
	var hdr PackageHeader
	var size int64
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "MalformedJSON", fmt.Sprintf("multipart body: %v", err))
			return
		}
		switch part.FormName() {
		case "UpdateParameters":
			dec := json.NewDecoder(io.LimitReader(part, 1<<16))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&params); err != nil {
				writeError(w, http.StatusBadRequest, "MalformedJSON", fmt.Sprintf("UpdateParameters part: %v", err))
				return
			}
			sawParams = true
		case "UpdateFile":
			hdr, size, err = readPackage(part)
			if err != nil {
				writeError(w, http.StatusBadRequest, "ActionParameterValueFormatError", fmt.Sprintf("UpdateFile part: %v", err))
				return
			}
			sawFile = true
		default:
			_, _ = io.Copy(io.Discard, part) // OEM parts: ignored, as the spec allows
		}
		part.Close()
	}
	if !sawParams || !sawFile {
		writeError(w, http.StatusBadRequest, "ActionParameterMissing",
			fmt.Sprintf("The multipart upload needs the parts UpdateParameters and UpdateFile (UpdateParameters present: %v, UpdateFile present: %v).", sawParams, sawFile))
		return
	}
	if params.ApplyTime != "" && params.ApplyTime != "Immediate" && params.ApplyTime != "OnReset" {
		writeError(w, http.StatusBadRequest, "PropertyValueNotInList",
			fmt.Sprintf("The value %s for @Redfish.OperationApplyTime is not in the list of acceptable values [Immediate OnReset].", params.ApplyTime))
		return
	}
	ids, ok := b.targetIDs(w, params.Targets)
	if !ok {
		return
	}
	t := b.newTask("MultipartPush", multipartURL)
	b.log.Info("multipart image received", "task", t.ID, "component", hdr.Component, "version", hdr.Version, "bytes", size, "targets", ids)
	fetch := func(context.Context) (PackageHeader, int64, error) { return hdr, size, nil }
	b.wg.Add(1)
	go b.runUpdate(t, fetch, ids)
	b.respondTask(w, t)
}

func (b *BMC) newTask(op, target string) *task {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.taskSeq++
	t := &task{ID: fmt.Sprint(b.taskSeq), Op: op, TargetURI: target, State: taskRunning, Status: "OK",
		Start: b.cfg.Now(), duration: b.cfg.TaskDuration}
	b.tasks = append(b.tasks, t)
	return t
}

// runUpdate is the task body: get the image, wait out the flash time, and
// stage the new version (or fail, when the fault is armed).
func (b *BMC) runUpdate(t *task, fetch func(context.Context) (PackageHeader, int64, error), targets []string) {
	defer b.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-b.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	h, n, err := fetch(ctx)
	if err != nil {
		b.finishTask(t, taskException, err.Error())
		return
	}
	ids, err := b.resolveTargets(h, targets)
	if err != nil {
		b.finishTask(t, taskException, err.Error())
		return
	}
	timer := time.NewTimer(t.duration)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-b.done:
		return
	}
	if msg, failed := b.takeTaskFailure(); failed {
		b.finishTask(t, taskException, fmt.Sprintf("Update of %v to %s failed: %s", ids, h.Version, msg))
		return
	}
	b.mu.Lock()
	var msgs []string
	for _, id := range ids {
		f := b.fwByID(id)
		f.pending = h.Version
		f.flashes++
		when := "the next host reboot"
		if f.spec.Kind == KindBMC {
			when = "a BMC reset"
		}
		msgs = append(msgs, fmt.Sprintf("%s: version %s (%d bytes) staged; it activates on %s.", id, h.Version, n, when))
	}
	b.mu.Unlock()
	b.log.Info("firmware staged", "task", t.ID, "components", ids, "version", h.Version)
	b.finishTask(t, taskCompleted, msgs...)
}

// resolveTargets picks the members the package applies to: the Targets
// given (each must match the package) or every updateable match.
func (b *BMC) resolveTargets(h PackageHeader, targets []string) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(targets) > 0 {
		for _, id := range targets {
			if !h.Matches(id) {
				return nil, fmt.Errorf("the image is for component %q and does not apply to target %s", h.Component, id)
			}
		}
		return targets, nil
	}
	var ids []string
	for _, f := range b.fw {
		if f.spec.Updateable && h.Matches(f.spec.ID) {
			ids = append(ids, f.spec.ID)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("the image is for component %q, which matches no updateable inventory member", h.Component)
	}
	return ids, nil
}

func (b *BMC) finishTask(t *task, state string, msgs ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t.State, t.End, t.Messages = state, b.cfg.Now(), append(t.Messages, msgs...)
	if state == taskException {
		t.Status = "Critical"
		b.log.Warn("task failed", "task", t.ID, "messages", t.Messages)
	}
}

func (b *BMC) taskBodyLocked(t *task) map[string]any {
	pct := 100
	if !t.done() {
		pct = 0
		if t.duration > 0 {
			pct = min(99, int(b.cfg.Now().Sub(t.Start)*100/t.duration))
		}
	}
	msgs := []map[string]any{}
	for _, m := range t.Messages {
		id, sev := "Base.1.5.0.Success", "OK"
		if t.State == taskException {
			id, sev = "Base.1.5.0.InternalError", "Critical"
		}
		msgs = append(msgs, map[string]any{"MessageId": id, "Message": m, "Severity": sev})
	}
	obj := map[string]any{
		"@odata.type":     "#Task.v1_7_4.Task",
		"@odata.id":       tasksURL + "/" + t.ID,
		"Id":              t.ID,
		"Name":            t.Op + " task " + t.ID,
		"TaskState":       t.State,
		"TaskStatus":      t.Status,
		"PercentComplete": pct,
		"StartTime":       t.Start.Format(time.RFC3339),
		"TaskMonitor":     monitorsURL + "/" + t.ID,
		"Messages":        msgs,
		"Payload":         map[string]any{"TargetUri": t.TargetURI, "HttpOperation": "POST"},
	}
	if t.done() {
		obj["EndTime"] = t.End.Format(time.RFC3339)
	}
	return obj
}

func (b *BMC) respondTask(w http.ResponseWriter, t *task) {
	b.mu.Lock()
	body := b.taskBodyLocked(t)
	b.mu.Unlock()
	switch b.cfg.TaskShape {
	case ShapeTaskLocation:
		w.Header().Set("Location", tasksURL+"/"+t.ID)
		w.WriteHeader(http.StatusAccepted)
	case ShapeTaskBody:
		writeJSON(w, http.StatusAccepted, body)
	case ShapeMonitor:
		fallthrough
	default:
		w.Header().Set("Location", monitorsURL+"/"+t.ID)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusAccepted)
	}
}

// taskGoneLocked: a BMC that purges completed tasks (Config knob).
func (b *BMC) taskGoneLocked(t *task) bool { return t.done() && b.cfg.TaskGoneAfterCompletion }

func (b *BMC) findTaskLocked(id string) *task {
	i := slices.IndexFunc(b.tasks, func(t *task) bool { return t.ID == id })
	if i < 0 || b.taskGoneLocked(b.tasks[i]) {
		return nil
	}
	return b.tasks[i]
}

func (b *BMC) serveTasks(w http.ResponseWriter, id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if id == "" {
		members := []map[string]string{}
		for _, t := range b.tasks {
			if !b.taskGoneLocked(t) {
				members = append(members, map[string]string{"@odata.id": tasksURL + "/" + t.ID})
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"@odata.type": "#TaskCollection.TaskCollection", "@odata.id": tasksURL, "Name": "Task Collection",
			"Members": members, "Members@odata.count": len(members),
		})
		return
	}
	t := b.findTaskLocked(id)
	if t == nil {
		writeError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s/%s was not found.", tasksURL, id))
		return
	}
	writeJSON(w, http.StatusOK, b.taskBodyLocked(t))
}

// serveMonitor follows DSP0266's task monitor: 202 while running, the
// result once when done, 404 after that.
func (b *BMC) serveMonitor(w http.ResponseWriter, id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.findTaskLocked(id)
	if t == nil || t.monitorHit {
		writeError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s/%s was not found.", monitorsURL, id))
		return
	}
	body := b.taskBodyLocked(t)
	if !t.done() {
		w.Header().Set("Location", monitorsURL+"/"+id)
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusAccepted, body)
		return
	}
	t.monitorHit = true
	writeJSON(w, http.StatusOK, maps.Clone(body))
}
