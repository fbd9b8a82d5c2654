package task

import (
	"encoding/base64"
	"encoding/json"
	"strconv"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/nats-io/nats.go"
)

// Announcements on core NATS, no storage: the pusher's notice of a change
// it must act on at once, and a worker's cancel. Each is only a shortcut:
// the pusher and the workers re-read the records now and then, so a lost
// announcement costs latency, never a step.

// announce publishes data on subject (core NATS), unless l is quiet.
func (l *Lifecycle) announce(subject string, data []byte) error {
	if l.quiet {
		return nil
	}
	return l.store.JetStream().Conn().Publish(subject, data)
}

// The subjects (jetstream.Names' NoticeSubject and CancelSubject, under
// nats.prefix): a change the leader's pusher must act on at once (an
// execution that ended, a delivery reopened) is announced per bot with
// the task id as the body; a task's cancellation is announced per task,
// and every worker listens (the record says canceled first; workers also
// re-read it now and then).

func (l *Lifecycle) notice(r *Record) { l.noticeAt(r, 0) }

// Headers of a notice that carries the record as written and its
// revision (the body stays the task id, which every pusher reads).
const (
	noticeRecordHeader = "Botctl-Record" // the record's JSON, base64 (std)
	noticeRevHeader    = "Botctl-Rev"
)

// noticeAt announces r, written at revision rev (0: unknown), with the
// record when rev is known: the pusher then steps the ending with no read
// of its own, one JetStream round trip less between the complete answer
// and the final frame.
func (l *Lifecycle) noticeAt(r *Record, rev uint64) {
	if l.quiet {
		return
	}
	if err := l.store.JetStream().Conn().PublishMsg(NoticeMsg(l.store.Names(), r, rev)); err != nil {
		l.log.Debug().Err(err).Str("task", r.ID).Msg("notice not published; the pusher finds the change on its next read")
	}
}

// NoticeMsg is the notice of r, written at revision rev: the task id as
// its body and, when rev is known (not 0), the record and its revision
// in headers (NoticeOf reads them; a pusher that does not ignores them).
func NoticeMsg(names jetstream.Names, r *Record, rev uint64) *nats.Msg {
	m := nats.NewMsg(names.NoticeSubject(r.Bot))
	m.Data = []byte(r.ID)
	if rev > 0 {
		if raw, err := schema.Marshal(r); err == nil {
			m.Header.Set(noticeRecordHeader, base64.StdEncoding.EncodeToString(raw))
			m.Header.Set(noticeRevHeader, strconv.FormatUint(rev, 10))
		}
	}
	return m
}

// NoticeOf reads a notice (Names.NoticeSubject): the task id, and the record as
// written at revision rev when the notice carries it (nil, 0: read it). A
// record whose header does not decode, names another task, or was written
// by a newer botctl, is ignored.
func NoticeOf(m *nats.Msg) (id string, r *Record, rev uint64) {
	id = string(m.Data)
	if m.Header == nil {
		return id, nil, 0
	}
	raw, err := base64.StdEncoding.DecodeString(m.Header.Get(noticeRecordHeader))
	if err != nil || len(raw) == 0 {
		return id, nil, 0
	}
	rev, err = strconv.ParseUint(m.Header.Get(noticeRevHeader), 10, 64)
	if err != nil || rev == 0 {
		return id, nil, 0
	}
	if schema.Of(raw) > schema.Version {
		return id, nil, 0 // read from the bucket, where Get refuses it
	}
	var rec Record
	if err := json.Unmarshal(raw, &rec); err != nil || rec.ID != id {
		return id, nil, 0
	}
	return id, &rec, rev
}
