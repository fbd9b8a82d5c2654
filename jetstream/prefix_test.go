package jetstream

import (
	natsjs "github.com/nats-io/nats.go/jetstream"
	"testing"
	"time"
)

// Two environments on one NATS account, told apart by their prefixes: a
// task published by one is never pulled by the other's workers, a busy
// conversation in one is free in the other, and neither reads the other's
// records.
func TestTwoPrefixesDoNotSeeEachOthersTasks(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	prod := declare(t, js, Options{Prefix: "BOTCTL"})
	staging := declare(t, js, Options{Prefix: "BOTCTL_STAGING"})

	if _, err := prod.PublishTask(ctx, "b", "alice", "m-prod", []byte("prod task")); err != nil {
		t.Fatal(err)
	}
	// Busy in prod, free in staging: the conversation mutex is per prefix.
	if _, err := prod.PublishTask(ctx, "b", "alice", "m-prod-2", []byte("x")); !errorsIs(err, ErrConversationBusy) {
		t.Fatalf("second prod task: %v, want ErrConversationBusy", err)
	}
	if _, err := staging.PublishTask(ctx, "b", "alice", "m-staging", []byte("staging task")); err != nil {
		t.Fatalf("staging task for the same conversation: %v", err)
	}
	if _, err := prod.Tasks().Put(ctx, "rec-prod", []byte("prod record")); err != nil {
		t.Fatal(err)
	}

	for name, tc := range map[string]struct {
		st   *Store
		want string
	}{"prod": {prod, "prod task"}, "staging": {staging, "staging task"}} {
		batch, err := tc.st.Workers().Fetch(10, natsjs.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for m := range batch.Messages() {
			got = append(got, string(m.Data()))
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		if batch.Error() != nil {
			t.Fatalf("%s fetch: %v", name, batch.Error())
		}
		if len(got) != 1 || got[0] != tc.want {
			t.Fatalf("%s workers pulled %q, want only %q", name, got, tc.want)
		}
	}
	if _, err := staging.Tasks().Get(ctx, "rec-prod"); !errorsIs(err, natsjs.ErrKeyNotFound) {
		t.Fatalf("staging read prod's record: %v", err)
	}
	if prod.Names().TaskStream == staging.Names().TaskStream || prod.Names().TaskSubjectPrefix == staging.Names().TaskSubjectPrefix {
		t.Fatalf("names overlap: %+v %+v", prod.Names(), staging.Names())
	}
}
