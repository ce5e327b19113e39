package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"

	"github.com/stmcginnis/gofish"
)

// ErrUnknownOutcome marks a mutation whose request reached the BMC but whose
// answer never came back (timeout, connection cut). The BMC may have acted:
// poll for the target state (RecoverJob, FirmwareInventory,
// PendingBiosAttributes) before retrying, never blindly repeat it.
var ErrUnknownOutcome = errors.New("outcome unknown: the request was sent but the answer was lost")

// UnknownOutcomeError is the ErrUnknownOutcome with what is needed to find
// out what happened.
type UnknownOutcomeError struct {
	Op  string // what was asked, e.g. "SimpleUpdate"
	URI string // where it was sent
	// KnownTasks are the TaskService members before the request (nil when
	// the BMC has no TaskService): a task not among them was created by it.
	KnownTasks  []string
	TasksListed bool
	Err         error
}

func (e *UnknownOutcomeError) Error() string {
	return fmt.Sprintf("%s (POST/PATCH %s): %v: %v", e.Op, e.URI, ErrUnknownOutcome, e.Err)
}

func (e *UnknownOutcomeError) Unwrap() []error { return []error{ErrUnknownOutcome, e.Err} }

// reply is a mutation's answer, body read.
type reply struct {
	Status   int
	Header   http.Header
	Body     []byte
	BodyErr  error
	Location string
}

// mutate sends one mutating request (fn must issue exactly one) under the
// per-call deadline and the usual 401 re-login. When the request was
// written but no HTTP answer came back, the error is an
// *UnknownOutcomeError; an HTTP error status is a definite refusal.
func (c *Client) mutate(ctx context.Context, op, uri string, known []string, listed bool,
	fn func(api *gofish.APIClient) (*http.Response, error)) (*reply, error) {
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			wrote.Store(true)
		}
	}}
	var rep *reply
	err := c.call(httptrace.WithClientTrace(ctx, trace), op, func(api *gofish.APIClient) error {
		wrote.Store(false)
		resp, err := fn(api)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		rep = readReply(resp)
		return nil
	})
	if err != nil {
		if wrote.Load() && statusOf(err) == 0 {
			return nil, &UnknownOutcomeError{Op: op, URI: uri, KnownTasks: known, TasksListed: listed, Err: err}
		}
		return nil, err
	}
	return rep, nil
}

func readReply(resp *http.Response) *reply {
	rep := &reply{Status: resp.StatusCode, Header: resp.Header, Location: resp.Header.Get("Location")}
	rep.Body, rep.BodyErr = io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return rep
}

// getJSON reads uri into v (when the body is not empty).
func getJSON(api *gofish.APIClient, uri string, v any) (*http.Response, error) {
	resp, err := api.Get(uri)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", uri, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body) // bounded by the transport (maxResponseBytes)
	if err != nil {
		return resp, fmt.Errorf("GET %s: reading body: %w", uri, err)
	}
	if v != nil && len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, v); err != nil {
			return resp, fmt.Errorf("GET %s: parse body: %w", uri, err)
		}
	}
	return resp, nil
}
