package task_test

import (
	"testing"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
)

// The notice of a finished answer carries the record as written and its
// revision, so the pusher needs no read; its body stays the task id (what
// every pusher reads). A notice whose record does not decode or names
// another task carries none.
func TestFinishNoticeCarriesTheRecord(t *testing.T) {
	f := newFixture(t, jetstream.Options{})
	notices, err := f.env.Conn.SubscribeSync(f.env.Store.Names().NoticeSubject("b"))
	if err != nil {
		t.Fatal(err)
	}
	f.env.Conn.Flush()
	m := f.queue("m1", "alice")
	attempt, _, err := f.lc.Start(f.ctx, m, "queue", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.lc.Finish(f.ctx, m.TaskID, attempt, "the answer"); err != nil {
		t.Fatal(err)
	}
	n, err := notices.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	id, rec, rev := task.NoticeOf(n)
	_, stored, err := task.Get(f.ctx, f.env.Store.Tasks(), m.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if string(n.Data) != m.TaskID || id != m.TaskID || rec == nil || rec.Exec != task.Succeeded || rec.AnswerHash != task.Hash("the answer") || rev != stored {
		t.Fatalf("notice: body %q, id %q, record %+v at %d; stored at %d", n.Data, id, rec, rev, stored)
	}

	// A cancel's notice carries no record: the pusher reads it.
	q := f.queue("m2", "bob")
	if _, err := f.lc.Cancel(f.ctx, q.TaskID, "stop"); err != nil {
		t.Fatal(err)
	}
	n, err = notices.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if id, rec, rev := task.NoticeOf(n); id != q.TaskID || rec != nil || rev != 0 {
		t.Fatalf("cancel notice: %q %+v %d", id, rec, rev)
	}

	// Headers that do not hold: no record.
	bad := task.NoticeMsg(jetstream.NamesFor(""), &task.Record{ID: "t1", Bot: "b"}, 7)
	bad.Data = []byte("t2") // the record names another task
	if _, rec, _ := task.NoticeOf(bad); rec != nil {
		t.Fatal("a record of another task was taken")
	}
	bad = task.NoticeMsg(jetstream.NamesFor(""), &task.Record{ID: "t1", Bot: "b"}, 7)
	bad.Header.Set("Botctl-Record", "not base64!")
	if id, rec, _ := task.NoticeOf(bad); id != "t1" || rec != nil {
		t.Fatal("a corrupt record was taken")
	}
	bad = task.NoticeMsg(jetstream.NamesFor(""), &task.Record{ID: "t1", Bot: "b"}, 7)
	bad.Header.Set("Botctl-Rev", "x")
	if _, rec, _ := task.NoticeOf(bad); rec != nil {
		t.Fatal("a record without a revision was taken")
	}
	if id, rec, rev := task.NoticeOf(task.NoticeMsg(jetstream.NamesFor(""), &task.Record{ID: "t1", Bot: "b"}, 7)); id != "t1" || rec == nil || rev != 7 {
		t.Fatalf("good notice: %q %v %d", id, rec, rev)
	}
}

// Notices and cancels are announced under nats.prefix: an environment
// sharing the NATS account with another (its own prefix) neither hears
// nor sends the other's (issue 25 item 10; before, both used botctl.*).
func TestAnnouncementsStayUnderThePrefix(t *testing.T) {
	f := newFixture(t, jetstream.Options{Prefix: "STAGING"})
	other, err := f.env.Conn.SubscribeSync("botctl.>")
	if err != nil {
		t.Fatal(err)
	}
	own, err := f.env.Conn.SubscribeSync("staging.>")
	if err != nil {
		t.Fatal(err)
	}
	f.env.Conn.Flush()
	m := f.queue("m1", "alice")
	if _, err := f.lc.Cancel(f.ctx, m.TaskID, "operator cancel"); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		msg, err := own.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("announcements under staging.: %v (seen %v)", err, seen)
		}
		if msg.Subject == "staging.notice.b" || msg.Subject == f.env.Store.Names().CancelSubject(m.TaskID) {
			seen[msg.Subject] = true
		}
	}
	if msg, err := other.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("an announcement of environment STAGING on %s", msg.Subject)
	}
	if n := jetstream.NamesFor(""); n.NoticeSubject("b") != "botctl.notice.b" || n.CancelSubjects() != "botctl.cancel.*" {
		t.Fatalf("default subjects changed: %s %s", n.NoticeSubject("b"), n.CancelSubjects())
	}
}
