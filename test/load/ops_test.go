package main

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// TestOpKind names each kind of JetStream operation the way nats.go's
// KV and consumers put it on the wire.
func TestOpKind(t *testing.T) {
	hdr := func(k, v string) nats.Header { h := nats.Header{}; h.Set(k, v); return h }
	cases := []struct {
		m    nats.Msg
		want string
	}{
		{nats.Msg{Subject: "$KV.BOTCTL_OUTPUT.b1.t1"}, "KV put BOTCTL_OUTPUT"},
		{nats.Msg{Subject: "$KV.BOTCTL_TASKS.b1.t1", Header: hdr(nats.ExpectedLastSubjSeqHdr, "0")}, "KV create BOTCTL_TASKS"},
		{nats.Msg{Subject: "$KV.BOTCTL_TASKS.b1.t1", Header: hdr(nats.ExpectedLastSubjSeqHdr, "42")}, "KV update BOTCTL_TASKS"},
		{nats.Msg{Subject: "$KV.BOTCTL_PENDING.x", Header: hdr("KV-Operation", "DEL")}, "KV delete BOTCTL_PENDING"},
		{nats.Msg{Subject: "$JS.API.STREAM.MSG.GET.KV_BOTCTL_TASKS"}, "KV get (API) BOTCTL_TASKS"},
		{nats.Msg{Subject: "$JS.API.DIRECT.GET.KV_BOTCTL_OUTPUT.$KV.BOTCTL_OUTPUT.k"}, "KV get (direct) BOTCTL_OUTPUT"},
		{nats.Msg{Subject: "$JS.API.CONSUMER.MSG.NEXT.BOTCTL_TASKS.workers"}, "fetch request BOTCTL_TASKS.workers"},
		{nats.Msg{Subject: "$JS.ACK.BOTCTL_TASKS.workers.1.2.3.4.5", Data: []byte("+WPI")}, "ack +WPI BOTCTL_TASKS.workers"},
		{nats.Msg{Subject: "$JS.ACK.BOTCTL_TASKS.workers.1.2.3.4.5", Data: []byte("+ACK"), Reply: "_INBOX.x"}, "ack +ACK confirmed BOTCTL_TASKS.workers"},
		{nats.Msg{Subject: "botctl.tasks.b1.c1", Reply: "$JS.ACK.BOTCTL_TASKS.workers.1.2.3.4.5"}, "delivery BOTCTL_TASKS (work queue fetch)"},
		{nats.Msg{Subject: "$KV.BOTCTL_OUTPUT.k", Reply: "$JS.ACK.KV_BOTCTL_OUTPUT.Abc123.1.2.3.4.5"}, "delivery KV_BOTCTL_OUTPUT (watch)"},
		{nats.Msg{Subject: "botctl.tasks.b1.c1"}, "publish botctl.tasks.>"},
	}
	for _, c := range cases {
		if got := opKind(&c.m); got != c.want {
			t.Errorf("opKind(%q, reply %q) = %q, want %q", c.m.Subject, c.m.Reply, got, c.want)
		}
	}
	// A reply is named by its request; a fetch's inbox stays its own.
	oc := newOpCount()
	oc.add(&nats.Msg{Subject: "$JS.API.STREAM.MSG.GET.KV_BOTCTL_TASKS", Reply: "_INBOX.a"})
	oc.add(&nats.Msg{Subject: "_INBOX.a", Data: []byte("{}")})
	oc.add(&nats.Msg{Subject: "_INBOX.a"})
	if n := oc.ops["reply to KV get (API) BOTCTL_TASKS"]; n == nil || n.n != 1 {
		t.Errorf("replies to the get: %+v, want 1", n)
	}
	if n := oc.ops["reply to (none seen: heartbeats, flow control, or a reply ahead of its request)"]; n == nil || n.n != 1 {
		t.Errorf("second message on the inbox: %+v, want 1 unmatched", n)
	}
	// The connection publishing tasks is the leader's: its requests are
	// told from the others' by their inbox.
	oc = newOpCount()
	oc.add(&nats.Msg{Subject: "botctl.tasks.b1.c1", Reply: "_INBOX.L.1"})
	oc.add(&nats.Msg{Subject: "$KV.BOTCTL_TASKS.k", Reply: "_INBOX.L.2"})
	oc.add(&nats.Msg{Subject: "$KV.BOTCTL_TASKS.k", Reply: "_INBOX.W.1"})
	oc.add(&nats.Msg{Subject: "_INBOX.W.1"})
	if l, n := oc.leaderShare("KV put BOTCTL_TASKS"); l != 1 || n != 2 {
		t.Errorf("leader's share of the puts: %d of %d, want 1 of 2", l, n)
	}
	if l, n := oc.leaderShare("reply to KV put BOTCTL_TASKS"); l != 0 || n != 1 {
		t.Errorf("leader's share of the replies: %d of %d, want 0 of 1", l, n)
	}
}
