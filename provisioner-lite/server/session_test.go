package server

import (
	"reflect"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// TestEveryEventBodyHasHandler: a body added to Event must get its own
// entry in eventHandlers, not fall through to storeEvent unnoticed (a
// kind that must not be stored as an event, like samples, would be).
func TestEveryEventBodyHasHandler(t *testing.T) {
	m := (&curev1.Event{}).ProtoReflect()
	fields := m.Descriptor().Oneofs().ByName("body").Fields()
	if fields.Len() == 0 {
		t.Fatal("Event has no body fields")
	}
	for i := range fields.Len() {
		fd := fields.Get(i)
		ev := &curev1.Event{}
		ev.ProtoReflect().Set(fd, ev.ProtoReflect().NewField(fd))
		body := reflect.TypeOf(ev.GetBody())
		if body == nil {
			t.Fatalf("body %s: setting it left the oneof empty", fd.Name())
		}
		if _, ok := eventHandlers[body]; !ok {
			t.Errorf("event body %s (%v) has no handler in eventHandlers", fd.Name(), body)
		}
	}
	if len(eventHandlers) != fields.Len() {
		t.Errorf("eventHandlers has %d entries for %d event bodies", len(eventHandlers), fields.Len())
	}
	if _, ok := eventHandlers[reflect.TypeOf((&curev1.Event{}).GetBody())]; ok {
		t.Error("an event without a body has a handler: it must reach storeEvent, which refuses it")
	}
}
