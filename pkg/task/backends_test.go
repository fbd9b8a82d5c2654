package task

import (
	"fmt"
	"testing"
)

// The backends asked are kept attempt by attempt, the latest
// MaxBackendSteps; AnsweredBy is the latest attempt's answering (or cut)
// backend, and none when no backend's text is the answer.
func TestBackendSteps(t *testing.T) {
	var r Record
	r.addBackends(1, []BackendStep{{Backend: "a", Outcome: "failed"}, {Backend: "b", Outcome: "cut"}})
	if r.AnsweredBy != "b" || len(r.Backends) != 2 || r.Backends[1].Attempt != 1 {
		t.Fatalf("after attempt 1: %q %+v", r.AnsweredBy, r.Backends)
	}
	r.addBackends(2, []BackendStep{{Backend: "a", Outcome: "skipped"}, {Backend: "b", Outcome: "failed"}})
	if r.AnsweredBy != "" || r.Backends[3].Attempt != 2 {
		t.Fatalf("after attempt 2: %q %+v", r.AnsweredBy, r.Backends)
	}
	for i := range MaxBackendSteps {
		r.addBackends(3+i, []BackendStep{{Backend: fmt.Sprint(i), Outcome: "answered"}})
	}
	if len(r.Backends) != MaxBackendSteps || r.Backends[0].Attempt != 3 || r.AnsweredBy != fmt.Sprint(MaxBackendSteps-1) {
		t.Fatalf("bounded: %d steps, first %+v, answered by %q", len(r.Backends), r.Backends[0], r.AnsweredBy)
	}
	r.addBackends(99, nil) // nothing told: nothing changes
	if r.AnsweredBy == "" {
		t.Fatal("an attempt with no steps cleared AnsweredBy")
	}
}
