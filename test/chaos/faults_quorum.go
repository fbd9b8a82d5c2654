package main

import (
	"fmt"
	"time"

	"github.com/botctl/botctl/test/infracluster"
)

// quorumLoss kills -9 two of the three members of one cluster (etcd or
// NATS: ms), the first of them first (the leader's own server, say),
// leaves them down for d, restarts both and waits for the whole infra to
// be healthy again. A node's election term cannot be renewed without
// etcd's quorum; without NATS's every JetStream call fails while the
// leaders keep their connections and spool. Either way the service must
// stop cleanly (nothing answered twice, nothing half-sent) and resume
// once the quorum is back, with every message of the outage answered
// (the spool's, the backfill's) or marked.
func (h *Harness) quorumLoss(r *RoundResult, ms []*infracluster.Member, d time.Duration) error {
	if len(ms) != 2 {
		return fmt.Errorf("quorum loss: want 2 members, got %d", len(ms))
	}
	l, err := h.Leader()
	if err != nil {
		return err
	}
	t0 := time.Now()
	for _, m := range ms {
		m.Proc.Kill()
	}
	r.note("kill -9 %s and %s (quorum lost) for %s; the bot's leader was %s", ms[0].Name, ms[1].Name, d, l.ID)
	time.Sleep(time.Until(t0.Add(d)))
	for _, m := range ms {
		if err := h.Infra.Restart(m, 2*time.Minute); err != nil {
			return fmt.Errorf("restart %s: %w", m.Name, err)
		}
	}
	back := time.Now()
	if err := h.Infra.WaitHealthy(2 * time.Minute); err != nil {
		return err
	}
	r.note("quorum back %.1fs after the restarts", time.Since(back).Seconds())
	if _, err := h.C.WaitStable(h.Cfg.Takeover + time.Minute); err != nil {
		return fmt.Errorf("no stable cluster after the quorum came back: %w", err)
	}
	r.note("cluster stable %.1fs after the restarts", time.Since(back).Seconds())
	return nil
}

// leaderNATSServer is the index of the NATS server the bot's leader is
// connected to (through its proxy), or -1.
func (h *Harness) leaderNATSServer() (int, error) {
	n, err := h.Leader()
	if err != nil {
		return -1, err
	}
	for i, p := range h.links[n.ID].NATS {
		if p.Conns() > 0 {
			return i, nil
		}
	}
	return -1, nil
}

// routePartitionLeaderNATS cuts the NATS server the bot's leader is
// connected to off from its cluster (every route to and from it
// blackholed) for d, while the leader's client connection stays up and
// its pings are answered: every JetStream call through it fails. The
// leader must move its connection to another server (after
// nats.jetstream_failover) or, failing that, give up its bots; answers
// keep flowing. When the leader's connection through its proxy to the
// cut-off server closes is noted, and whether the bot changed hands.
func (h *Harness) routePartitionLeaderNATS(r *RoundResult, d time.Duration) error {
	l, err := h.Leader()
	if err != nil {
		return err
	}
	i, err := h.leaderNATSServer()
	if err != nil {
		return err
	}
	if i < 0 {
		return fmt.Errorf("leader %s has no open link to any NATS server", l.ID)
	}
	m := h.Infra.NATS[i]
	p := h.links[l.ID].NATS[i]
	t0 := time.Now()
	if err := h.Infra.IsolateNATS(m); err != nil {
		return err
	}
	r.note("routes of %s (the leader %s's server) cut for %s; its clients stay connected", m.Name, l.ID, d)
	left := time.Time{}
	for time.Since(t0) < d {
		if left.IsZero() && p.Conns() == 0 {
			left = time.Now()
			r.Settled = left
			r.note("the leader %s left %s %.1fs after the cut", l.ID, m.Name, left.Sub(t0).Seconds())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if left.IsZero() {
		r.note("the leader %s never left %s", l.ID, m.Name)
	}
	if now, err := h.C.Leaders(); err == nil {
		r.note("leaders at the end of the cut: %v", now[bot])
	}
	if err := h.Infra.HealNATS(m); err != nil {
		return err
	}
	return h.Infra.WaitHealthy(2 * time.Minute)
}
