package pusher_test

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// A task record a newer botctl wrote, undelivered at the term's start:
// this leader does not deliver it and does not write it, and the bot's
// other tasks are delivered (the rebuild does not wait for it).
func TestNewerRecordIsLeftAndTheRestDelivered(t *testing.T) {
	r := newRig(t, wecomsim.Config{})
	ctx := context.Background()
	newer := r.ask("carol", "asked of a newer node")
	r.write(newer.ID, "Hello, carol.", true) // answered, not delivered
	e, err := r.js.Store.Tasks().Get(ctx, newer.ID)
	if err != nil {
		t.Fatal(err)
	}
	own := []byte(`{"v":` + strconv.Itoa(schema.Version) + `,`)
	if !bytes.HasPrefix(e.Value(), own) {
		t.Fatalf("record not stamped: %.40s", e.Value())
	}
	rev, err := r.js.Store.Tasks().Put(ctx, newer.ID, append([]byte(`{"v":`+strconv.Itoa(schema.Version+1)+`,`), e.Value()[len(own):]...))
	if err != nil {
		t.Fatal(err)
	}
	waiting := r.ask("bob", "asked before the term")
	r.start(pusher.Config{Lifecycle: r.lc})
	r.write(waiting.ID, "Hello, bob.", true)
	r.waitDelivery(waiting.ID, task.Delivered)
	r.p.Notify(newer.ID)
	rec := r.ask("alice", "asked during the term")
	r.write(rec.ID, "Hello, alice.", true)
	r.waitDelivery(rec.ID, task.Delivered)
	if e, err := r.js.Store.Tasks().Get(ctx, newer.ID); err != nil || e.Revision() != rev {
		t.Fatalf("the newer record was written over: %v", err)
	}
	for _, m := range r.botMessages("carol") {
		if strings.Contains(m.Content, "Hello, carol.") {
			t.Fatalf("this leader sent the newer task's answer: %+v", m)
		}
	}
}
