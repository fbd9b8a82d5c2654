package access

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/botctl/botctl/pkg/task"
)

// The dedupe read runs beside the publish: a worker may pull the task and
// open its record from the queue message (this callback's req_id and
// term) before the read lands. That record is not a duplicate's; one
// with another req_id, or of another term, is.
func TestDedupeReadTellsThisCallbacksRecordFromADuplicates(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	js := &bound{store: env.Store}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if hasRecord(ctx, js, "t_none", "req-1", 7) {
		t.Fatal("no record: a duplicate")
	}
	r := task.RecordOf(task.Message{Bot: "b", MsgID: "m1", ReqID: "req-1", TermRev: 7, Received: time.Now().UTC()})
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Store.Tasks().Create(ctx, r.ID, raw); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		reqID string
		term  int64
		dup   bool
	}{
		{"req-1", 7, false}, // opened by the worker of this very publish
		{"req-2", 7, true},  // redelivered: a new req_id
		{"req-1", 8, true},  // another term's record
	} {
		if got := hasRecord(ctx, js, r.ID, c.reqID, c.term); got != c.dup {
			t.Errorf("req_id %s term %d: duplicate %v, want %v", c.reqID, c.term, got, c.dup)
		}
	}
	// A value that is not a record: the task exists, so a duplicate.
	if _, err := env.Store.Tasks().Put(ctx, "t_corrupt", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if !hasRecord(ctx, js, "t_corrupt", "req-1", 7) {
		t.Error("an unreadable record: not a duplicate")
	}
	// A record a newer botctl wrote: the task exists, so a duplicate.
	newer := `{"v":` + strconv.Itoa(schema.Version+1) + `,"id":"t_newer","req_id":"req-1","term":7}`
	if _, err := env.Store.Tasks().Put(ctx, "t_newer", []byte(newer)); err != nil {
		t.Fatal(err)
	}
	if !hasRecord(ctx, js, "t_newer", "req-1", 7) {
		t.Error("a newer botctl's record: not a duplicate")
	}
}
