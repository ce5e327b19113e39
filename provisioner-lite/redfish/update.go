package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"

	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// UpdateCapabilities is what the BMC's UpdateService offers.
type UpdateCapabilities struct {
	URI               string
	ServiceEnabled    bool
	SimpleUpdate      bool
	SimpleUpdateURI   string   // the action target
	TransferProtocols []string // allowable values; empty: not published
	MultipartPushURI  string   // empty: no MultipartHttpPushUri
	InventoryURI      string
}

// Job is an accepted update: where to follow it.
type Job struct {
	Op         string // SimpleUpdate, MultipartPush
	MonitorURI string // DSP0266 task monitor, if the BMC gave one
	TaskURI    string // the Task resource, if known
	Accepted   time.Time
}

// TaskGone is TaskResult.State when the task (or its monitor) vanished
// before a final state was read, or the BMC gave none to follow: the
// outcome must be judged from the inventory in TaskResult.Inventory.
const TaskGone = "Gone"

// ErrTaskFailed marks a task that ended in Exception, Killed, Cancelled or
// with a Critical status.
var ErrTaskFailed = errors.New("task failed")

// TaskResult is how a task ended.
type TaskResult struct {
	State           string // Completed, Exception, ... or TaskGone
	Status          string // TaskStatus: OK, Warning, Critical
	PercentComplete int
	Messages        []string
	TaskURI         string
	Inventory       []FirmwareItem // read when State is TaskGone
}

// taskDoc is the part of a Task the driver reads.
type taskDoc struct {
	ODataID         string `json:"@odata.id"`
	ODataType       string `json:"@odata.type"`
	TaskState       string
	TaskStatus      string
	PercentComplete *int
	TaskMonitor     string
	Messages        []struct{ MessageId, Message string }
	Payload         *struct{ TargetUri string }
}

// TaskStates are the Redfish TaskState values (Task v1_7); a TaskResult's
// State is one of them or TaskGone.
var TaskStates = []string{"New", "Starting", "Running", "Suspended", "Interrupted", "Pending",
	"Stopping", "Completed", "Killed", "Exception", "Service", "Cancelling", "Cancelled"}

// TaskStatuses are the Health values a TaskStatus may have.
var TaskStatuses = []string{"OK", "Warning", "Critical"}

// Bounds on the task text kept: it goes to logs, the store and operators.
const (
	maxTaskMessages   = 16
	maxTaskMessageLen = 512
)

// canonical returns the member of set equal to s ignoring case ("" for none).
func canonical(set []string, s string) string {
	for _, v := range set {
		if strings.EqualFold(v, s) {
			return v
		}
	}
	return ""
}

// links returns the task's own and its monitor's URI as paths on the BMC;
// a link that is not one is dropped (the caller follows what it knows).
func (d taskDoc) links() (task, monitor string) {
	task, _ = bmcPath(d.ODataID)
	monitor, _ = bmcPath(d.TaskMonitor)
	return task, monitor
}

// result checks a task the BMC sent and reduces it to what the driver
// reports: a known state and status, a percentage within 0-100, and at most
// a few short messages without control characters.
func (d taskDoc) result() (*TaskResult, error) {
	state := canonical(TaskStates, d.TaskState)
	if state == "" {
		return nil, fmt.Errorf("TaskState %q is not a Redfish task state", textsafe.BoundedLine(d.TaskState, 64))
	}
	status := canonical(TaskStatuses, d.TaskStatus)
	if status == "" && d.TaskStatus != "" {
		return nil, fmt.Errorf("TaskStatus %q is not OK, Warning or Critical", textsafe.BoundedLine(d.TaskStatus, 64))
	}
	r := &TaskResult{State: state, Status: status}
	r.TaskURI, _ = d.links()
	if d.PercentComplete != nil {
		r.PercentComplete = min(max(*d.PercentComplete, 0), 100)
	}
	for i, m := range d.Messages {
		if i == maxTaskMessages {
			r.Messages = append(r.Messages, fmt.Sprintf("(%d more messages)", len(d.Messages)-i))
			break
		}
		txt := m.Message
		if txt == "" {
			txt = m.MessageId
		}
		r.Messages = append(r.Messages, textsafe.BoundedLine(txt, maxTaskMessageLen))
	}
	return r, nil
}

func terminal(state string) bool {
	switch state {
	case "Completed", "Exception", "Killed", "Cancelled":
		return true
	}
	return false
}

// UpdateService reads what the BMC offers for firmware updates, including
// the SimpleUpdate transfer protocols (inline or from the ActionInfo).
func (c *Client) UpdateService(ctx context.Context) (*UpdateCapabilities, error) {
	var caps *UpdateCapabilities
	err := c.call(ctx, "read UpdateService", func(api *gofish.APIClient) error {
		us, err := api.Service.UpdateService()
		if err != nil {
			return fmt.Errorf("UpdateService: %w", err)
		}
		if us == nil || us.ODataID == "" {
			return fmt.Errorf("%w: the service root links no UpdateService", ErrNotSupported)
		}
		var actionInfo string
		caps, actionInfo, err = parseUpdateService(us.RawData)
		if err != nil {
			return fmt.Errorf("UpdateService %s: %w", us.ODataID, err)
		}
		if caps.URI == "" {
			caps.URI = us.ODataID
		}
		if actionInfo != "" {
			var info json.RawMessage
			if _, err := getJSON(api, actionInfo, &info); err != nil {
				return fmt.Errorf("SimpleUpdate ActionInfo: %w", err)
			}
			if caps.TransferProtocols, err = parseActionInfoProtocols(info); err != nil {
				return fmt.Errorf("SimpleUpdate ActionInfo %s: %w", actionInfo, err)
			}
		}
		return nil
	})
	return caps, err
}

// parseUpdateService reads an UpdateService body. actionInfo is the
// SimpleUpdate ActionInfo to read when the action lists no protocols inline.
// Every link must be a path on the BMC.
func parseUpdateService(raw []byte) (caps *UpdateCapabilities, actionInfo string, err error) {
	var doc struct {
		ODataID              string `json:"@odata.id"`
		ServiceEnabled       *bool
		MultipartHttpPushUri string
		FirmwareInventory    struct {
			ID string `json:"@odata.id"`
		}
		Actions struct {
			SimpleUpdate *struct {
				Target     string    `json:"target"`
				ActionInfo string    `json:"@Redfish.ActionInfo"`
				Protocols  allowList `json:"TransferProtocol@Redfish.AllowableValues"`
			} `json:"#UpdateService.SimpleUpdate"`
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, "", fmt.Errorf("parse: %w", err)
	}
	caps = &UpdateCapabilities{ServiceEnabled: doc.ServiceEnabled == nil || *doc.ServiceEnabled}
	caps.URI, _ = bmcPath(doc.ODataID) // only named in messages
	if caps.MultipartPushURI, err = optPath("MultipartHttpPushUri", doc.MultipartHttpPushUri); err != nil {
		return nil, "", err
	}
	if caps.InventoryURI, err = optPath("FirmwareInventory", doc.FirmwareInventory.ID); err != nil {
		return nil, "", err
	}
	if su := doc.Actions.SimpleUpdate; su != nil && su.Target != "" {
		if caps.SimpleUpdateURI, err = optPath("SimpleUpdate target", su.Target); err != nil {
			return nil, "", err
		}
		caps.SimpleUpdate, caps.TransferProtocols = true, normalizeAllowed(su.Protocols, transferProtocols)
		if len(su.Protocols) == 0 {
			if actionInfo, err = optPath("SimpleUpdate @Redfish.ActionInfo", su.ActionInfo); err != nil {
				return nil, "", err
			}
		}
	}
	return caps, actionInfo, nil
}

// parseActionInfoProtocols reads the TransferProtocol allowable values out
// of a SimpleUpdate ActionInfo.
func parseActionInfoProtocols(raw []byte) ([]string, error) {
	var info struct {
		Parameters []struct {
			Name            string
			AllowableValues allowList
		}
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(raw, &info); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	for _, p := range info.Parameters {
		if p.Name == "TransferProtocol" {
			return normalizeAllowed(p.AllowableValues, transferProtocols), nil
		}
	}
	return nil, nil
}

// SimpleUpdateFetches reports whether the BMC's SimpleUpdate can fetch
// imageURI: the action exists and its allowable TransferProtocols (when
// published) include the URI's scheme. A BMC whose only protocol is SCP
// cannot pull from the HTTP artifact server; a multipart push still can.
func (u *UpdateCapabilities) SimpleUpdateFetches(imageURI string) bool {
	if u == nil || !u.SimpleUpdate {
		return false
	}
	_, err := ChooseTransferProtocol(imageURI, "", u.TransferProtocols)
	return err == nil
}

// ChooseTransferProtocol negotiates SimpleUpdate's TransferProtocol: the
// one asked for (or the ImageURI's scheme), which must be allowed when the
// BMC publishes a list.
func ChooseTransferProtocol(imageURI, asked string, allowed []string) (string, error) {
	scheme := ""
	if u, err := url.Parse(imageURI); err == nil && u.Scheme != "" {
		scheme = strings.ToUpper(u.Scheme)
	}
	asked = strings.ToUpper(asked)
	switch {
	case asked == "" && scheme == "":
		return "", fmt.Errorf("ImageURI %q has no scheme and no TransferProtocol was given", imageURI)
	case asked != "" && scheme != "" && asked != scheme:
		return "", fmt.Errorf("TransferProtocol %s disagrees with the ImageURI %q", asked, imageURI)
	case asked == "":
		asked = scheme
	}
	if len(allowed) > 0 && !slices.Contains(allowed, asked) {
		return "", fmt.Errorf("%w: TransferProtocol %s is not in the BMC's allowable values %v", ErrNotSupported, asked, allowed)
	}
	return asked, nil
}

// targetURIs turns inventory Ids into member URIs; URIs pass through. An Id
// needs the BMC's FirmwareInventory: sent bare, it is no Redfish target.
func targetURIs(inventory string, targets []string) ([]string, error) {
	out := make([]string, 0, len(targets))
	for _, t := range targets {
		if !strings.HasPrefix(t, "/") {
			if inventory == "" {
				return nil, fmt.Errorf("target %q is an inventory Id but the UpdateService links no FirmwareInventory: give it as a URI", t)
			}
			t = strings.TrimSuffix(inventory, "/") + "/" + t
		}
		out = append(out, t)
	}
	return out, nil
}

// SimpleUpdate asks the BMC to fetch imageURI (from the artifact server)
// and flash targets (inventory Ids or URIs; empty: the BMC decides from the
// image). protocol "" takes the ImageURI's scheme. Follow the Job with
// WaitTask. An *UnknownOutcomeError means the BMC may have accepted it:
// RecoverJob before trying again.
func (c *Client) SimpleUpdate(ctx context.Context, imageURI string, targets []string, protocol string) (*Job, error) {
	caps, err := c.UpdateService(ctx)
	if err != nil {
		return nil, err
	}
	if !caps.SimpleUpdate {
		return nil, fmt.Errorf("redfish %s: %w: UpdateService %s has no #UpdateService.SimpleUpdate action", c.ep.URL, ErrNotSupported, caps.URI)
	}
	proto, err := ChooseTransferProtocol(imageURI, protocol, caps.TransferProtocols)
	if err != nil {
		return nil, fmt.Errorf("redfish %s: SimpleUpdate %s: %w", c.ep.URL, imageURI, err)
	}
	body := map[string]any{"ImageURI": imageURI}
	if len(caps.TransferProtocols) > 0 || protocol != "" {
		body["TransferProtocol"] = proto
	}
	if len(targets) > 0 {
		if body["Targets"], err = targetURIs(caps.InventoryURI, targets); err != nil {
			return nil, fmt.Errorf("redfish %s: SimpleUpdate %s: %w", c.ep.URL, imageURI, err)
		}
	}
	known, listed := c.knownTasks(ctx)
	rep, err := c.mutate(ctx, "SimpleUpdate", caps.SimpleUpdateURI, known, listed, func(api *gofish.APIClient) (*http.Response, error) {
		return api.Post(caps.SimpleUpdateURI, body)
	})
	if err != nil {
		return nil, fmt.Errorf("redfish %s: SimpleUpdate %s: %w", c.ep.URL, imageURI, err)
	}
	job, err := parseJob("SimpleUpdate", rep)
	if err != nil {
		return nil, fmt.Errorf("redfish %s: SimpleUpdate %s: %w", c.ep.URL, imageURI, err)
	}
	c.log.Info("SimpleUpdate accepted", "image", imageURI, "protocol", proto, "targets", targets, "monitor", job.MonitorURI, "task", job.TaskURI)
	return job, nil
}

var taskURIRE = regexp.MustCompile(`^/redfish/v1/TaskService/Tasks/[^/]+$`)

// parseJob reads the three answer shapes: Location = task monitor,
// Location = Task resource, Task in the body (or any mix).
func parseJob(op string, rep *reply) (*Job, error) {
	job := &Job{Op: op, Accepted: time.Now()}
	// A Location that is no path on the BMC is ignored like a missing one:
	// the body may still name the task, else the inventory tells.
	if loc, err := bmcPath(rep.Location); err == nil {
		if u, err := url.Parse(loc); err == nil && taskURIRE.MatchString(strings.TrimSuffix(u.Path, "/")) {
			job.TaskURI = loc
		} else {
			job.MonitorURI = loc
		}
	}
	var doc taskDoc
	if rep.BodyErr == nil && len(bytes.TrimSpace(rep.Body)) > 0 && json.Unmarshal(rep.Body, &doc) == nil &&
		(doc.TaskState != "" || strings.HasPrefix(doc.ODataType, "#Task.")) {
		task, monitor := doc.links()
		if job.TaskURI == "" {
			job.TaskURI = task
		}
		if job.MonitorURI == "" {
			job.MonitorURI = monitor
		}
	}
	if rep.BodyErr != nil && job.MonitorURI == "" && job.TaskURI == "" {
		return nil, fmt.Errorf("%w: HTTP %d answer cut short: %v", ErrUnknownOutcome, rep.Status, rep.BodyErr)
	}
	return job, nil
}

// exactReader yields exactly n bytes of r and fails if r ends sooner.
type exactReader struct {
	r    io.Reader
	n    int64
	read atomic.Int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	left := e.n - e.read.Load()
	if left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	k, err := e.r.Read(p)
	e.read.Add(int64(k))
	if errors.Is(err, io.EOF) {
		if e.read.Load() < e.n {
			return k, fmt.Errorf("image ended after %d of %d bytes: %w", e.read.Load(), e.n, io.ErrUnexpectedEOF)
		}
		err = nil
	}
	return k, err
}

// MultipartPush uploads an image of size bytes to the MultipartHttpPushUri
// with UpdateParameters {Targets}. The image streams from r to the socket
// (mime/multipart framing around it, exact Content-Length); it is never
// held in memory. If r is an io.Seeker the upload is retried once after a
// dead session (401).
func (c *Client) MultipartPush(ctx context.Context, r io.Reader, size int64, targets []string) (*Job, error) {
	if size <= 0 {
		return nil, fmt.Errorf("redfish %s: MultipartPush: image size %d: want > 0", c.ep.URL, size)
	}
	caps, err := c.UpdateService(ctx)
	if err != nil {
		return nil, err
	}
	if caps.MultipartPushURI == "" {
		return nil, fmt.Errorf("redfish %s: %w: UpdateService %s has no MultipartHttpPushUri", c.ep.URL, ErrNotSupported, caps.URI)
	}
	turis, err := targetURIs(caps.InventoryURI, targets)
	if err != nil {
		return nil, fmt.Errorf("redfish %s: MultipartPush: %w", c.ep.URL, err)
	}
	params, err := json.Marshal(map[string]any{"Targets": turis, "@Redfish.OperationApplyTime": "Immediate"})
	if err != nil {
		return nil, fmt.Errorf("redfish %s: MultipartPush: %w", c.ep.URL, err)
	}
	known, listed := c.knownTasks(ctx)
	start := int64(-1)
	if s, ok := r.(io.Seeker); ok {
		if start, err = s.Seek(0, io.SeekCurrent); err != nil {
			start = -1
		}
	}
	for attempt := 0; ; attempt++ {
		rep, err := c.push(ctx, caps.MultipartPushURI, params, r, size)
		if err == nil {
			job, err := parseJob("MultipartPush", rep)
			if err != nil {
				return nil, fmt.Errorf("redfish %s: MultipartPush: %w", c.ep.URL, err)
			}
			c.log.Info("multipart image accepted", "bytes", size, "targets", targets, "monitor", job.MonitorURI, "task", job.TaskURI)
			return job, nil
		}
		var ue *UnknownOutcomeError
		if errors.As(err, &ue) {
			ue.KnownTasks, ue.TasksListed = known, listed
			return nil, fmt.Errorf("redfish %s: MultipartPush: %w", c.ep.URL, ue)
		}
		if attempt == 0 && statusOf(err) == http.StatusUnauthorized && !c.isBasic() && start >= 0 {
			c.log.Warn("session rejected during the upload; logging in again and resending", "err", err)
			if _, serr := r.(io.Seeker).Seek(start, io.SeekStart); serr == nil {
				if lerr := c.login(ctx); lerr == nil {
					continue
				}
			}
		}
		return nil, brief(fmt.Errorf("redfish %s: MultipartPush to %s: %w", c.ep.URL, caps.MultipartPushURI, err))
	}
}

func (c *Client) isBasic() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.basic
}

// push sends one multipart upload. It bypasses gofish, whose multipart
// helper buffers the whole image.
func (c *Client) push(ctx context.Context, uri string, params []byte, r io.Reader, size int64) (*reply, error) {
	var frame bytes.Buffer
	mw := multipart.NewWriter(&frame)
	ph := textproto.MIMEHeader{}
	ph.Set("Content-Disposition", `form-data; name="UpdateParameters"`)
	ph.Set("Content-Type", "application/json")
	pw, err := mw.CreatePart(ph)
	if err != nil {
		return nil, err
	}
	if _, err := pw.Write(params); err != nil {
		return nil, err
	}
	fh := textproto.MIMEHeader{}
	fh.Set("Content-Disposition", `form-data; name="UpdateFile"; filename="image.bin"`)
	fh.Set("Content-Type", "application/octet-stream")
	if _, err := mw.CreatePart(fh); err != nil {
		return nil, err
	}
	prefix := bytes.Clone(frame.Bytes())
	frame.Reset()
	if err := mw.Close(); err != nil { // writes only the closing boundary
		return nil, err
	}
	suffix := frame.Bytes()
	body := io.MultiReader(bytes.NewReader(prefix), &exactReader{r: r, n: size}, bytes.NewReader(suffix))

	var wrote atomic.Bool
	uctx, cancel := context.WithTimeout(ctx, c.o.UploadTimeout)
	defer cancel()
	uctx = httptrace.WithClientTrace(uctx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			wrote.Store(true) // the whole image went out: the BMC may act on it
		}
	}})
	req, err := http.NewRequestWithContext(uctx, http.MethodPost, c.ep.URL+uri, body)
	if err != nil {
		return nil, err
	}
	req.ContentLength = int64(len(prefix)) + size + int64(len(suffix))
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Accept", "application/json")
	c.mu.Lock()
	api, basic := c.api, c.basic
	c.mu.Unlock()
	if basic {
		req.SetBasicAuth(c.ep.Username, c.ep.Password)
	} else if s, err := api.GetSession(); err == nil {
		req.Header.Set("X-Auth-Token", s.Token)
	}
	// The transport bounds dial, TLS and the wait for headers; the upload
	// itself gets UploadTimeout rather than the per-call timeout.
	resp, err := (&http.Client{Transport: c.httpc.Transport}).Do(req)
	if err != nil {
		if wrote.Load() {
			return nil, &UnknownOutcomeError{Op: "MultipartPush", URI: uri, Err: err}
		}
		return nil, fmt.Errorf("upload %d bytes: %w", size, err)
	}
	defer resp.Body.Close()
	rep := readReply(resp)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, schemas.ConstructError(resp.StatusCode, rep.Body)
	}
	return rep, nil
}

// knownTasks lists the TaskService members now, so a task created by a
// request whose answer is lost can be told apart.
// KnownTasks lists the TaskService's members before an update is sent
// (false: the list could not be read): a caller that records them can
// later tell the task its request created, even from another process.
func (c *Client) KnownTasks(ctx context.Context) ([]string, bool) { return c.knownTasks(ctx) }

func (c *Client) knownTasks(ctx context.Context) ([]string, bool) {
	uris, err := c.taskURIs(ctx)
	if err != nil {
		c.log.Debug("TaskService unreadable; a lost answer cannot be traced to its task", "err", err)
		return nil, false
	}
	return uris, true
}

func (c *Client) taskURIs(ctx context.Context) ([]string, error) {
	var uris []string
	err := c.call(ctx, "list tasks", func(api *gofish.APIClient) error {
		ts, err := api.Service.Tasks()
		if err != nil {
			return fmt.Errorf("TaskService: %w", err)
		}
		if ts == nil || ts.ODataID == "" {
			return fmt.Errorf("%w: no TaskService", ErrNotSupported)
		}
		var doc struct {
			Tasks struct {
				ID string `json:"@odata.id"`
			}
		}
		if err := json.Unmarshal(ts.RawData, &doc); err != nil || doc.Tasks.ID == "" {
			return fmt.Errorf("TaskService %s links no Tasks collection", ts.ODataID)
		}
		tasks, err := bmcPath(doc.Tasks.ID)
		if err != nil {
			return fmt.Errorf("TaskService %s: Tasks: %w", ts.ODataID, err)
		}
		var coll json.RawMessage
		if _, err := getJSON(api, tasks, &coll); err != nil {
			return err
		}
		uris, err = parseMembers(coll)
		if err != nil {
			return fmt.Errorf("Tasks %s: %w", tasks, err)
		}
		return nil
	})
	return uris, err
}

// RecoverJob finds the task a request with a lost answer created: a task
// that was not there before and whose payload (when the BMC says) targets
// the same URI. (nil, nil) means the BMC shows no such task: the request
// did not take, and it is safe to send again.
func (c *Client) RecoverJob(ctx context.Context, ue *UnknownOutcomeError) (*Job, error) {
	uris, err := c.taskURIs(ctx)
	if err != nil {
		return nil, fmt.Errorf("redfish %s: recover %s: %w", c.ep.URL, ue.Op, err)
	}
	var found *Job
	for _, u := range uris {
		if ue.TasksListed && slices.Contains(ue.KnownTasks, u) {
			continue
		}
		var doc taskDoc
		err := c.call(ctx, "read task", func(api *gofish.APIClient) error {
			_, err := getJSON(api, u, &doc)
			return err
		})
		if err != nil {
			if statusOf(err) == http.StatusNotFound {
				continue
			}
			return nil, fmt.Errorf("redfish %s: recover %s: %w", c.ep.URL, ue.Op, err)
		}
		if doc.Payload != nil && doc.Payload.TargetUri != "" && doc.Payload.TargetUri != ue.URI {
			continue // another operation's task
		}
		if !ue.TasksListed && doc.Payload == nil {
			continue // cannot tell whose it is
		}
		_, monitor := doc.links()
		found = &Job{Op: ue.Op, TaskURI: u, MonitorURI: monitor, Accepted: time.Now()}
	}
	if found != nil {
		c.log.Warn("lost answer traced to a task: the BMC accepted the request", "op", ue.Op, "task", found.TaskURI)
	}
	return found, nil
}

// WaitTask follows job to a final state, polling every poll. It handles a
// task monitor (202 while running, the result when done), a Location that
// is the Task itself, and a Task URI from the body. When the monitor and
// task answer 404 before a final state was seen, it re-reads the
// inventory and returns State TaskGone: the caller judges from versions.
// A failed task returns its result and an error wrapping ErrTaskFailed.
// Transient errors (BMC busy, 503, timeouts) are retried until ctx ends.
func (c *Client) WaitTask(ctx context.Context, job *Job, poll time.Duration) (*TaskResult, error) {
	if poll <= 0 {
		poll = 2 * time.Second
	}
	for _, u := range []string{job.MonitorURI, job.TaskURI} {
		if _, err := optPath("job", u); err != nil {
			return nil, fmt.Errorf("redfish %s: wait for task: %w", c.ep.URL, err)
		}
	}
	uri, monitor := job.MonitorURI, true
	if uri == "" {
		uri, monitor = job.TaskURI, false
	}
	taskURI := job.TaskURI // learned from a monitor's body when not given
	var last *TaskResult
	var lastErr error
	for uri != "" {
		var doc taskDoc
		var code int
		err := c.call(ctx, "poll task "+uri, func(api *gofish.APIClient) error {
			resp, err := getJSON(api, uri, &doc)
			if resp != nil {
				code = resp.StatusCode
			}
			return err
		})
		switch {
		case statusOf(err) == http.StatusNotFound || statusOf(err) == http.StatusGone:
			if monitor && taskURI != "" && taskURI != uri {
				c.log.Debug("task monitor gone; reading the Task", "monitor", uri, "task", taskURI)
				uri, monitor = taskURI, false
				continue
			}
			uri = ""
			continue
		case err != nil:
			lastErr = err
			c.log.Debug("task poll failed; retrying", "uri", uri, "err", err)
		case doc.TaskState != "":
			res, verr := doc.result()
			if verr != nil {
				// Perhaps a vendor's transitional value: keep polling, and
				// say so if it never turns into a state we know.
				lastErr = fmt.Errorf("task %s: %w", uri, verr)
				c.log.Debug("task answer not understood; polling on", "uri", uri, "err", verr)
				break
			}
			last = res
			if taskURI == "" {
				taskURI = res.TaskURI
			}
			if last.TaskURI == "" {
				last.TaskURI = taskURI
			}
			if terminal(last.State) {
				return finish(last)
			}
		case code == http.StatusOK && monitor:
			// The monitor returned the operation's own answer: done.
			if taskURI != "" {
				uri, monitor = taskURI, false
				continue
			}
			return &TaskResult{State: "Completed", Messages: []string{"the task monitor returned the operation's result"}}, nil
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("redfish %s: waiting for task %s (last state %+v, last error %v): %w", c.ep.URL, job.TaskURI+job.MonitorURI, last, lastErr, ctx.Err())
		case <-time.After(poll):
		}
	}
	inv, err := c.FirmwareInventory(ctx)
	if err != nil {
		return nil, fmt.Errorf("redfish %s: task %s vanished and the inventory is unreadable: %w", c.ep.URL, job.TaskURI+job.MonitorURI, err)
	}
	res := &TaskResult{State: TaskGone, TaskURI: taskURI, Inventory: inv,
		Messages: []string{"the task and its monitor are gone (404) before a final state was read; judge by the inventory"}}
	if last != nil {
		res.PercentComplete, res.Status = last.PercentComplete, last.Status
	}
	c.log.Warn("task vanished; outcome to be judged from the inventory", "monitor", job.MonitorURI, "task", job.TaskURI)
	return res, nil
}

func finish(r *TaskResult) (*TaskResult, error) {
	if r.State != "Completed" || r.Status == "Critical" {
		return r, fmt.Errorf("%w: task %s ended %s/%s: %s", ErrTaskFailed, r.TaskURI, r.State, r.Status, strings.Join(r.Messages, "; "))
	}
	return r, nil
}
