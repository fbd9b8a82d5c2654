package main

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// subjectCount counts the NATS messages of a step by kind of subject,
// seen by a subscriber on ">" in the nodes' account: every client publish
// (queue publishes, KV writes, JetStream API requests, acks) and every
// delivery to an inbox (API replies; fetched and watched messages, which
// arrive on their original subject and are counted by stream). What
// the servers send each other (routes, Raft) is not seen. The subscriber
// costs the servers one more delivery per message, so a step counted
// this way is not a timed one (-subjects is off by default).
type subjectCount struct {
	mu  sync.Mutex
	n   map[string]int
	ops *opCount
	nc  *nats.Conn
}

func countSubjects(url string) (*subjectCount, error) {
	nc, err := nats.Connect(url, nats.Name("load subject counter"))
	if err != nil {
		return nil, err
	}
	c := &subjectCount{n: map[string]int{}, ops: newOpCount(), nc: nc}
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		k := subjectKind(m.Subject)
		if strings.HasPrefix(m.Reply, "$JS.ACK.") {
			// A consumer's delivery, seen on its original subject:
			// counted by the stream it came from.
			k = "delivered from " + strings.Split(m.Reply, ".")[2]
		}
		c.mu.Lock()
		c.n[k]++
		c.mu.Unlock()
		c.ops.add(m)
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	sub.SetPendingLimits(-1, -1)
	return c, nil
}

// stop ends the count and returns it, by subject and by operation.
func (c *subjectCount) stop() (map[string]int, *opCount) {
	c.nc.Drain()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, c.ops
}

// subjectKind maps a subject to its kind: ids, keys and sequence numbers
// dropped. "$KV.BOTCTL_TASKS.x.y" → "$KV.BOTCTL_TASKS.>", an API request
// keeps its verb and stream ("$JS.API.STREAM.MSG.GET.KV_BOTCTL_TASKS"),
// an ack its stream and consumer, an inbox is "_INBOX.>".
func subjectKind(s string) string {
	t := strings.Split(s, ".")
	keep := func(n int) string {
		if len(t) <= n {
			return s
		}
		return strings.Join(t[:n], ".") + ".>"
	}
	switch {
	case strings.HasPrefix(s, "_INBOX."):
		return "_INBOX.>"
	case strings.HasPrefix(s, "$KV."):
		return keep(2)
	case strings.HasPrefix(s, "$JS.ACK."):
		return keep(4)
	case strings.HasPrefix(s, "$JS.API.DIRECT.GET."):
		return keep(5)
	case strings.HasPrefix(s, "$JS.API.CONSUMER.MSG.NEXT."):
		return keep(6)
	case strings.HasPrefix(s, "$JS.API."):
		// The verb's words, then the stream (the first upper-case word
		// after them), then nothing.
		for i := 2; i < len(t); i++ {
			if t[i] != strings.ToUpper(t[i]) || strings.ContainsAny(t[i], "_") || i > 5 {
				return keep(i + 1)
			}
		}
		return s
	}
	return keep(2)
}

// subjectTable is the counts as Markdown, per answered message.
func subjectTable(n map[string]int, answered int) string {
	type row struct {
		k string
		n int
	}
	var rows []row
	total := 0
	for k, v := range n {
		rows = append(rows, row{k, v})
		total += v
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].n > rows[j].n })
	var b strings.Builder
	per := func(v int) string {
		if answered == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", float64(v)/float64(answered))
	}
	fmt.Fprintf(&b, "| subject kind | messages | per answered message |\n|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %d | %s |\n", r.k, r.n, per(r.n))
	}
	fmt.Fprintf(&b, "| all | %d | %s |\n", total, per(total))
	return b.String()
}
