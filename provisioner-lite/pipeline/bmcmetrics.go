package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/metrics"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
)

// meteredBMC times every Redfish operation of the pipeline, by the BMC's
// vendor (folded into a bounded label) and operation; its health reads are
// meteredHealth's.
type meteredBMC struct {
	BMC
	meteredHealth
}

// meter records Redfish calls of one BMC connection.
type meter struct {
	m      *metrics.Metrics
	vendor string
}

// meteredHealth times the health reads (BMCHealth) of a connection.
type meteredHealth struct {
	meter
	bmc BMC
}

// metered wraps b when metrics are on. The vendor is read once: it is what
// the BMC said at login.
func metered(b BMC, m *metrics.Metrics) BMC {
	if m == nil {
		return b
	}
	v := ""
	if vb, ok := b.(interface{ Vendor() string }); ok {
		v = vb.Vendor()
	}
	return &meteredBMC{BMC: b, meteredHealth: meteredHealth{meter: meter{m: m, vendor: v}, bmc: b}}
}

func (mt meter) obs(op string, start time.Time, err error) {
	mt.m.RedfishCall(mt.vendor, op, time.Since(start), err)
}

func (b *meteredBMC) PowerState(ctx context.Context) (s string, err error) {
	defer func(t time.Time) { b.obs("power_state", t, err) }(time.Now())
	return b.BMC.PowerState(ctx)
}

func (b *meteredBMC) PowerOn(ctx context.Context) (err error) {
	defer func(t time.Time) { b.obs("power_on", t, err) }(time.Now())
	return b.BMC.PowerOn(ctx)
}

func (b *meteredBMC) PowerOff(ctx context.Context, force bool) (err error) {
	defer func(t time.Time) { b.obs("power_off", t, err) }(time.Now())
	return b.BMC.PowerOff(ctx, force)
}

func (b *meteredBMC) Reset(ctx context.Context, resetType string) (err error) {
	defer func(t time.Time) { b.obs("reset", t, err) }(time.Now())
	return b.BMC.Reset(ctx, resetType)
}

func (b *meteredBMC) SetBootOverride(ctx context.Context, target redfish.BootTarget, once bool) (err error) {
	defer func(t time.Time) { b.obs("set_boot_override", t, err) }(time.Now())
	return b.BMC.SetBootOverride(ctx, target, once)
}

func (b *meteredBMC) FirmwareInventory(ctx context.Context) (items []redfish.FirmwareItem, err error) {
	defer func(t time.Time) { b.obs("firmware_inventory", t, err) }(time.Now())
	return b.BMC.FirmwareInventory(ctx)
}

func (b *meteredBMC) UpdateService(ctx context.Context) (u *redfish.UpdateCapabilities, err error) {
	defer func(t time.Time) { b.obs("update_service", t, err) }(time.Now())
	return b.BMC.UpdateService(ctx)
}

func (b *meteredBMC) SimpleUpdate(ctx context.Context, imageURI string, targets []string, protocol string) (j *redfish.Job, err error) {
	defer func(t time.Time) { b.obs("simple_update", t, err) }(time.Now())
	return b.BMC.SimpleUpdate(ctx, imageURI, targets, protocol)
}

func (b *meteredBMC) MultipartPush(ctx context.Context, r io.Reader, size int64, targets []string) (j *redfish.Job, err error) {
	defer func(t time.Time) { b.obs("multipart_push", t, err) }(time.Now())
	return b.BMC.MultipartPush(ctx, r, size, targets)
}

func (b *meteredBMC) RecoverJob(ctx context.Context, ue *redfish.UnknownOutcomeError) (j *redfish.Job, err error) {
	defer func(t time.Time) { b.obs("recover_job", t, err) }(time.Now())
	return b.BMC.RecoverJob(ctx, ue)
}

func (b *meteredBMC) KnownTasks(ctx context.Context) (uris []string, listed bool) {
	defer func(t time.Time) {
		var err error
		if !listed {
			err = errTasksUnlisted
		}
		b.obs("list_tasks", t, err)
	}(time.Now())
	return b.BMC.KnownTasks(ctx)
}

// errTasksUnlisted is the metric's error of a TaskService that could not be
// listed.
var errTasksUnlisted = errors.New("task list unreadable")

func (b *meteredBMC) WaitTask(ctx context.Context, job *redfish.Job, poll time.Duration) (r *redfish.TaskResult, err error) {
	defer func(t time.Time) { b.obs("wait_task", t, err) }(time.Now())
	return b.BMC.WaitTask(ctx, job, poll)
}

func (b *meteredBMC) ResetManager(ctx context.Context, resetType string) (err error) {
	defer func(t time.Time) { b.obs("reset_manager", t, err) }(time.Now())
	return b.BMC.ResetManager(ctx, resetType)
}

func (b *meteredBMC) WaitBMC(ctx context.Context, budget time.Duration) (err error) {
	defer func(t time.Time) { b.obs("wait_bmc", t, err) }(time.Now())
	return b.BMC.WaitBMC(ctx, budget)
}

func (b *meteredBMC) BiosAttributes(ctx context.Context) (a map[string]any, err error) {
	defer func(t time.Time) { b.obs("bios_attributes", t, err) }(time.Now())
	return b.BMC.BiosAttributes(ctx)
}

func (b *meteredBMC) SetBiosAttributes(ctx context.Context, attrs map[string]any) (err error) {
	defer func(t time.Time) { b.obs("set_bios_attributes", t, err) }(time.Now())
	return b.BMC.SetBiosAttributes(ctx, attrs)
}

// health is the wrapped connection's health reader; a connection without
// one offers none (ErrNotSupported, recorded as such by the callers).
func (b *meteredHealth) health() (BMCHealth, error) {
	if h, ok := b.bmc.(BMCHealth); ok {
		return h, nil
	}
	return nil, fmt.Errorf("%w: this BMC connection reads no health resources", redfish.ErrNotSupported)
}

// obsHealth times a health read; a resource the BMC does not offer is not
// an error of the BMC.
func (mt meter) obsHealth(op string, start time.Time, err error) {
	if redfish.IsNotSupported(err) {
		err = nil
	}
	mt.obs(op, start, err)
}

func (b *meteredHealth) Sensors(ctx context.Context) (s *redfish.Sensors, err error) {
	defer func(t time.Time) { b.obsHealth("sensors", t, err) }(time.Now())
	h, err := b.health()
	if err != nil {
		return nil, err
	}
	return h.Sensors(ctx)
}

func (b *meteredHealth) PowerSupplies(ctx context.Context) (ps []redfish.Part, err error) {
	defer func(t time.Time) { b.obsHealth("power_supplies", t, err) }(time.Now())
	h, err := b.health()
	if err != nil {
		return nil, err
	}
	return h.PowerSupplies(ctx)
}

func (b *meteredHealth) Fans(ctx context.Context) (fs []redfish.Part, err error) {
	defer func(t time.Time) { b.obsHealth("fans", t, err) }(time.Now())
	h, err := b.health()
	if err != nil {
		return nil, err
	}
	return h.Fans(ctx)
}

func (b *meteredHealth) EventLog(ctx context.Context, since, until time.Time, max int) (l *redfish.EventLog, err error) {
	defer func(t time.Time) { b.obsHealth("event_log", t, err) }(time.Now())
	h, err := b.health()
	if err != nil {
		return nil, err
	}
	return h.EventLog(ctx, since, until, max)
}
