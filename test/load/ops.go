package main

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// opTally is one kind of JetStream operation's count and bytes on the
// wire (subject, reply, headers and payload: nats.Msg.Size).
type opTally struct{ n, bytes int }

// opCount tallies the messages a subscriber on ">" sees (subjectCount)
// by kind of operation rather than subject: queue publishes, KV writes
// by bucket and kind (put, create, update, delete, purge: the headers
// nats.go's KV sets), KV reads by bucket (API or direct get), acks by
// kind (+ACK, +WPI, -NAK, +TERM; "confirmed" when the ack asks for a
// reply), consumer fetch requests, deliveries by stream and consumer
// (the work queue's "workers" consumer, else a watch), and each reply
// on an inbox named by the request it answers. A reply seen before its
// request (the two can take different routes) is named "none seen".
//
// Who sent it: a request's reply inbox, and a reply's subject, start
// with the sending connection's inbox prefix ("_INBOX.<id>"); the
// connection that publishes the task queue's messages is the leader's.
// Messages with no inbox (acks without confirmation, deliveries, the
// advisories) are not told apart.
type opCount struct {
	mu      sync.Mutex
	ops     map[string]*opTally
	pending map[string]string         // reply inbox → the kind of its request
	byConn  map[string]map[string]int // kind → inbox prefix → messages
	leader  string                    // the inbox prefix of the connection publishing tasks
}

func newOpCount() *opCount {
	return &opCount{ops: map[string]*opTally{}, pending: map[string]string{}, byConn: map[string]map[string]int{}}
}

// inboxPrefix is "_INBOX.<id>" of an inbox subject, else "".
func inboxPrefix(s string) string {
	if !strings.HasPrefix(s, "_INBOX.") {
		return ""
	}
	t := strings.SplitN(s, ".", 3)
	if len(t) < 3 {
		return ""
	}
	return t[0] + "." + t[1]
}

// leaderShare is how many of kind's messages the leader's connection
// sent, and how many any connection was known to send.
func (c *opCount) leaderShare(kind string) (leader, known int) {
	for p, n := range c.byConn[kind] {
		known += n
		if p == c.leader && p != "" {
			leader += n
		}
	}
	return leader, known
}

func (c *opCount) add(m *nats.Msg) {
	k := opKind(m)
	c.mu.Lock()
	defer c.mu.Unlock()
	if strings.HasPrefix(m.Subject, "_INBOX.") && !strings.HasPrefix(m.Reply, "$JS.ACK.") {
		req, ok := c.pending[m.Subject]
		if !ok {
			req = "(none seen: heartbeats, flow control, or a reply ahead of its request)"
		} else if !strings.HasPrefix(req, "fetch request") {
			// A fetch's inbox gets every message of the batch and
			// status replies; any other request gets one reply.
			delete(c.pending, m.Subject)
		}
		k = "reply to " + req
	} else if m.Reply != "" && strings.HasPrefix(m.Reply, "_INBOX.") {
		c.pending[m.Reply] = k
	}
	conn := inboxPrefix(m.Reply)
	if strings.HasPrefix(m.Subject, "_INBOX.") {
		conn = inboxPrefix(m.Subject)
	}
	if conn != "" {
		if strings.HasPrefix(k, "publish "+subjectKind("botctl.tasks.x")) {
			c.leader = conn
		}
		if c.byConn[k] == nil {
			c.byConn[k] = map[string]int{}
		}
		c.byConn[k][conn]++
	}
	t := c.ops[k]
	if t == nil {
		t = &opTally{}
		c.ops[k] = t
	}
	t.n++
	t.bytes += m.Size()
}

// opKind names the operation one message is (see opCount).
func opKind(m *nats.Msg) string {
	s := m.Subject
	t := strings.Split(s, ".")
	if strings.HasPrefix(m.Reply, "$JS.ACK.") {
		// A consumer's delivery, seen on its original subject.
		r := strings.Split(m.Reply, ".")
		if len(r) > 3 {
			if r[3] == "workers" {
				return "delivery " + r[2] + " (work queue fetch)"
			}
			return "delivery " + r[2] + " (watch)"
		}
	}
	switch {
	case strings.HasPrefix(s, "$KV.") && len(t) > 2:
		op := "put"
		switch {
		case m.Header.Get("KV-Operation") == "DEL":
			op = "delete"
		case m.Header.Get("KV-Operation") == "PURGE":
			op = "purge"
		case m.Header.Get(nats.ExpectedLastSubjSeqHdr) == "0":
			op = "create"
		case m.Header.Get(nats.ExpectedLastSubjSeqHdr) != "":
			op = "update"
		}
		return "KV " + op + " " + t[1]
	case strings.HasPrefix(s, "$JS.API.STREAM.MSG.GET.") && len(t) > 5:
		return "KV get (API) " + strings.TrimPrefix(t[5], "KV_")
	case strings.HasPrefix(s, "$JS.API.DIRECT.GET.") && len(t) > 4:
		return "KV get (direct) " + strings.TrimPrefix(t[4], "KV_")
	case strings.HasPrefix(s, "$JS.API.CONSUMER.MSG.NEXT.") && len(t) > 6:
		return "fetch request " + t[5] + "." + t[6]
	case strings.HasPrefix(s, "$JS.ACK.") && len(t) > 3:
		kind := "ack"
		for _, a := range []string{"+ACK", "+WPI", "-NAK", "+TERM", "+NXT"} {
			if strings.HasPrefix(string(m.Data), a) {
				kind = a
			}
		}
		if len(m.Data) == 0 {
			kind = "+ACK"
		}
		if m.Reply != "" {
			kind += " confirmed"
		}
		return "ack " + kind + " " + t[2] + "." + t[3]
	case strings.HasPrefix(s, "$JS.EVENT."):
		// "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.<stream>.<consumer>":
		// the advisory's kind and stream.
		if len(t) > 5 && t[3] == "CONSUMER" || len(t) > 5 && t[3] == "STREAM" {
			return "JetStream advisory " + strings.Join(t[3:6], ".")
		}
		return "JetStream advisory " + strings.Join(t[2:min(len(t), 5)], ".")
	}
	return "publish " + subjectKind(s)
}

// opTable is the tallies as Markdown, per answered message; less, if
// set, is subtracted from a kind before the division (the load
// harness's own watch of the output bucket, which botctl does not
// make; its bytes in proportion) and named in the row.
func opTable(c *opCount, answered int, less map[string]int) string {
	type row struct {
		k, by string
		t     opTally
	}
	var rows []row
	var total opTally
	c.mu.Lock() // the counter's connection may still be draining
	defer c.mu.Unlock()
	for k, v := range c.ops {
		t := *v
		by := "–"
		if l, n := c.leaderShare(k); n > 0 {
			by = fmt.Sprintf("%.0f%%", 100*float64(l)/float64(n))
		}
		if l, ok := less[k]; ok && t.n > 0 {
			t.bytes -= t.bytes * min(l, t.n) / t.n
			t.n -= min(l, t.n)
			k += fmt.Sprintf(" (less the load harness's own watch: %d)", l)
		}
		rows = append(rows, row{k, by, t})
		total.n += t.n
		total.bytes += t.bytes
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].t.n != rows[j].t.n {
			return rows[i].t.n > rows[j].t.n
		}
		return rows[i].k < rows[j].k
	})
	per := func(v int) string {
		if answered == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", float64(v)/float64(answered))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| operation | messages | bytes | per answer | bytes per answer | sent by the leader |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s |\n", r.k, r.t.n, r.t.bytes, per(r.t.n), per(r.t.bytes), r.by)
	}
	fmt.Fprintf(&b, "| all | %d | %d | %s | %s | |\n", total.n, total.bytes, per(total.n), per(total.bytes))
	return b.String()
}
