package main

import (
	"fmt"
	"syscall"
	"time"

	"github.com/botctl/botctl/test/infracluster"
)

// Scenario is one fault, injected while traffic runs. Fault returns once
// the fault has been applied (and, where the scenario says so, undone);
// anything it leaves dead, the next round's restore brings back. A new
// scenario is one entry here: the harness provides the traffic, the
// restore, the probes and every check.
type Scenario struct {
	Name string
	Doc  string
	// Family groups scenarios by what fails (botctl process, network,
	// etcd, NATS, WeCom, worker); the smoke run covers every family.
	Family string
	// Smoke: part of TestChaosSmoke (make chaos-smoke, run by make test),
	// which must stay under 5 minutes on 2 cores and must not be flaky:
	// one scenario per family, the quickest that holds every invariant.
	Smoke bool
	// Kicks is how many connection replacements at the simulator the
	// fault itself makes unavoidable (a frozen leader cannot close its
	// socket before the new one subscribes); more are ping-pong.
	Kicks int64
	// Settle, if set, is how long this scenario's answers may take after
	// traffic stops, instead of Config.Settle: a fault whose messages are
	// owed late answers (the history audit's) needs longer than one answer.
	Settle func(c *Config) time.Duration
	Fault  func(h *Harness, r *RoundResult) error
}

// Fault families.
const (
	FamProcess = "botctl process"
	FamNetwork = "network partition"
	FamEtcd    = "etcd"
	FamNATS    = "NATS"
	FamWeCom   = "WeCom"
	FamWorker  = "worker"
	FamData    = "stored data"
)

// Scenarios are the matrix of issue 12, in run order. Every one is in the
// default matrix (make chaos). The NATS server faults come last, so
// whatever they leave behind in the JetStream cluster shows in their own
// rounds, not in the others'.
var Scenarios = []Scenario{
	{
		Name: "kill-leader", Family: FamProcess, Smoke: true,
		Doc: "kill -9 the leader's process group; restart it 5 s later",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.killLeader(r, 5*time.Second)
		},
	},
	{
		Name: "kill-leader-mid-download", Family: FamProcess,
		Doc: "a media message whose file's URL stalls, its download in progress on the leader, then kill -9 the leader's process group (restarted 5 s later): the message is answered or its user told it failed, once (the next leader's sweep gives it up past media.message_timeout)",
		// The sweep gives the message up past its deadline
		// (media.message_timeout, 2m, and a grace of 15 s) from its arrival.
		Settle: func(c *Config) time.Duration { return c.Settle + 2*time.Minute },
		Fault: func(h *Harness, r *RoundResult) error {
			return h.killLeaderMidDownload(r)
		},
	},
	{
		Name: "kill-leader-stays-down", Family: FamProcess,
		Doc: "kill -9 the leader's process group and leave it down for the rest of the round (two nodes serve)",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.killLeader(r, 0)
		},
	},
	{
		Name: "term-leader", Family: FamProcess,
		Doc: "SIGTERM the leader (graceful stop); restart it once it has exited",
		Fault: func(h *Harness, r *RoundResult) error {
			n, err := h.Leader()
			if err != nil {
				return err
			}
			if err := h.stopNode(r, n.ID); err != nil {
				return err
			}
			_, err = h.C.RestartNode(n.ID)
			return err
		},
	},
	{
		Name: "stop-leader", Family: FamProcess, Kicks: 1,
		Doc: "SIGSTOP the leader for TTL + 10 s, then SIGCONT (a paused VM); 1 kick is forced (the frozen leader cannot close its socket)",
		Fault: func(h *Harness, r *RoundResult) error {
			n, err := h.Leader()
			if err != nil {
				return err
			}
			t0 := time.Now()
			if err := n.Proc.Signal(syscall.SIGSTOP); err != nil {
				return err
			}
			resume := time.AfterFunc(h.Cfg.TTL+10*time.Second, func() { n.Proc.Signal(syscall.SIGCONT) })
			r.Takeovers = append(r.Takeovers, h.waitTakeover(n.ID, t0))
			time.Sleep(time.Until(t0.Add(h.Cfg.TTL + 10*time.Second)))
			if !resume.Stop() {
				return nil
			}
			return n.Proc.Signal(syscall.SIGCONT)
		},
	},
	{
		Name: "cut-leader-etcd", Family: FamNetwork, Smoke: true, Kicks: 1,
		Doc: "blackhole the leader's links to all three etcd members for 30 s; 1 kick is allowed (standbys depose it while it cannot hear etcd say so)",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.cutNode(r, true, true, false, 30*time.Second)
		},
	},
	{
		Name: "cut-leader-nats", Family: FamNetwork,
		Doc: "blackhole the leader's links to all three NATS servers for 30 s (it keeps its lock and connection; receipts spool)",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.cutNode(r, true, false, true, 30*time.Second)
		},
	},
	{
		Name: "cut-standby", Family: FamNetwork,
		Doc: "blackhole one standby's links to etcd and NATS for 30 s (nothing the users see may change)",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.cutNode(r, false, true, true, 30*time.Second)
		},
	},
	{
		Name: "kill-etcd-member", Family: FamEtcd,
		Doc: "kill -9 one etcd member (e1, e2, e3 in turn), restart it 10 s later",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.killMember(h.Infra.Etcd[(r.Round-1)%len(h.Infra.Etcd)], 10*time.Second)
		},
	},
	{
		Name: "kill-etcd-leader", Family: FamEtcd, Smoke: true,
		Doc: "kill -9 the etcd member that is raft leader, restart it 10 s later",
		Fault: func(h *Harness, r *RoundResult) error {
			m, err := h.Infra.EtcdLeader()
			if err != nil {
				return err
			}
			return h.killMember(m, 10*time.Second)
		},
	},
	{
		Name: "freeze-etcd-member", Family: FamEtcd,
		Doc: "SIGSTOP one etcd member (e1, e2, e3 in turn; quorum holds) for -freeze (5 min), then SIGCONT: no connection answers, none resets; 0 depositions (kicks), 0 lost",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.freezeMember(r, h.Infra.Etcd[(r.Round-1)%len(h.Infra.Etcd)])
		},
	},
	{
		Name: "freeze-leader-etcd-link", Family: FamNetwork,
		Doc: "blackhole the leader's link to one etcd member (e1, e2, e3 in turn) for -freeze (5 min): to the leader that member is frozen, to everyone else it is fine; 0 depositions (kicks), 0 lost",
		Fault: func(h *Harness, r *RoundResult) error {
			n, err := h.Leader()
			if err != nil {
				return err
			}
			i := (r.Round - 1) % len(h.Infra.Etcd)
			p := h.links[n.ID].Etcd[i]
			r.note("blackhole %s's link to %s for %s", n.ID, h.Infra.Etcd[i].Name, h.Cfg.Freeze)
			p.Blackhole()
			defer p.Heal()
			time.Sleep(h.Cfg.Freeze)
			return nil
		},
	},
	{
		Name: "corrupt-record", Family: FamData,
		Doc: "put a task record that does not decode by hand (with its index entry and queue message, in a conversation of its own), then SIGTERM the leader so the new one's rebuild meets it: skipped, one data incident, every real message answered; then `botctl tasks release` cleans up",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.corruptRecord(r)
		},
	},
	{
		Name: "sim-drop", Family: FamWeCom, Smoke: true,
		Doc: "the simulator drops the bot's connection (no close frame)",
		Fault: func(h *Harness, r *RoundResult) error {
			l, err := h.Leader()
			if err != nil {
				return err
			}
			t0 := time.Now()
			if err := h.simFault("drop", 0); err != nil {
				return err
			}
			r.Takeovers = append(r.Takeovers, h.waitTakeover(l.ID, t0))
			return nil
		},
	},
	{
		Name: "sim-stall-acks", Family: FamWeCom,
		Doc: "the simulator processes frames but sends no ack for 20 s",
		Fault: func(h *Harness, r *RoundResult) error {
			if err := h.simFault("stall_acks", 20); err != nil {
				return err
			}
			time.Sleep(20 * time.Second)
			return nil
		},
	},
	{
		Name: "sim-silence", Family: FamWeCom,
		Doc: "the simulator delivers no callback for 30 s (WeCom keeps them in its history: the backfill owes each an answer or a \"may be incomplete\" mark)",
		// The history audit finds the missed messages up to one period
		// (1m) after the silence, and answers a conversation's several
		// missed ones one after another (a busy one is read again 15 s
		// later): two answers, two waits, then the usual margin.
		Settle: func(c *Config) time.Duration { return c.Settle + 2*c.longest() + 90*time.Second },
		Fault: func(h *Harness, r *RoundResult) error {
			if err := h.simFault("silence", 30); err != nil {
				return err
			}
			time.Sleep(30 * time.Second)
			return nil
		},
	},
	{
		Name: "sim-revoke", Family: FamWeCom,
		Doc: "the simulator revokes the bot's secret; once botctl has raised the human incident, the harness plays the person: restores the secret, then `botctl incidents ack`; takeover counts from the ack",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.revokeAndRestore(r, 3*time.Second)
		},
	},
	{
		Name: "sim-group-silence", Family: FamWeCom,
		Doc: "group chat chaos-group gets a baseline of its own (a message every 2 s for silence_min_watched + 20 s), then the simulator withholds group callbacks from the connection until the next subscribe while direct messages still arrive: a route_silence incident, exactly one resubscribe, the group answered again (its withheld messages late, by the backfill)",
		// The group's gap is backfilled once its callbacks are heard
		// again: late answers, as sim-silence's.
		Settle: func(c *Config) time.Duration { return c.Settle + 2*c.longest() + 90*time.Second },
		Fault: func(h *Harness, r *RoundResult) error {
			return h.groupSilence(r, 2*time.Minute)
		},
	},
	{
		Name: "sim-gap-wecom-history", Family: FamWeCom,
		Doc:    "the nodes restarted one by one with backfill.history_url unset and the bot's message history authorized at the simulator; a drop with subscribes refused for 30 s (a gap): the gap's messages are read from WeCom's own history (the bot asks for its msg MCP server) and answered late; then the nodes restarted with their usual flags",
		Settle: func(c *Config) time.Duration { return c.Settle + 2*c.longest() + 90*time.Second },
		Fault: func(h *Harness, r *RoundResult) error {
			// The gap's incident closes when its backfill ends: a missed
			// message whose user goes on asking waits for a moment its
			// conversation is free, up to the pass's bound (ten minutes).
			return h.wecomHistoryGap(r, 30*time.Second, 11*time.Minute)
		},
	},
	{
		Name: "quorum-loss-etcd", Family: FamEtcd,
		Doc: "kill -9 two of the three etcd members (e1+e2, e2+e3, e3+e1 in turn) for 60 s, then restart them: no term can be renewed, the service stops cleanly and resumes; every message answered once (the backfill answers or marks those WeCom kept while no bot was connected)",
		// The outage's undelivered messages are answered late by the
		// backfill, as sim-silence's.
		Settle: func(c *Config) time.Duration { return c.Settle + 2*c.longest() + 90*time.Second },
		Fault: func(h *Harness, r *RoundResult) error {
			i := (r.Round - 1) % len(h.Infra.Etcd)
			return h.quorumLoss(r, []*infracluster.Member{h.Infra.Etcd[i], h.Infra.Etcd[(i+1)%len(h.Infra.Etcd)]}, time.Minute)
		},
	},
	{
		Name: "clock-skew", Family: FamProcess,
		Doc: "SIGTERM the leader and start it again with its clock probe 40 minutes ahead ($BOTCTL_TEST_CLOCK_OFFSET): it must lead nothing and run nothing (state clock_off) while the other two serve; after 60 s it restarts with its true clock",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.clockSkew(r, 40*time.Minute, 60*time.Second)
		},
	},
	{
		Name: "ai-backend-faults", Family: FamWorker,
		Doc: "the nodes restarted with an http backend first and the demo backend as its fallback (first_token_timeout 5s, breaker 3 failures / 15 s); the http backend healthy, then slow, then answering 503, then dying mid-stream, 30 s each, then healthy until it answered again: every question answered once (by the fallback, or, cut mid-stream, the user told once); then the usual flags again",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.aiBackendFaults(r, 30*time.Second)
		},
	},
	{
		Name: "kill-worker", Family: FamWorker, Smoke: true,
		Doc: "kill -9 a standby while it computes an answer (found in the task records), restart it 5 s later; the task is redelivered after the ack wait",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.killWorker(r)
		},
	},
	{
		Name: "kill-worker-last-delivery", Family: FamWorker,
		Doc: "chase one task: kill -9 whichever node computes it, on every delivery up to the queue's last (5); the user must be told it failed, once, and the conversation freed",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.killWorkerEveryDelivery(r)
		},
	},
	{
		Name: "rolling-restart", Family: FamProcess,
		Doc: "a deploy: SIGTERM, restart and wait for a stable cluster, node by node (n1, n2, n3)",
		Fault: func(h *Harness, r *RoundResult) error {
			for _, id := range h.nodeIDs {
				if err := h.stopNode(r, id); err != nil {
					return err
				}
				if _, err := h.C.RestartNode(id); err != nil {
					return fmt.Errorf("restart %s: %w", id, err)
				}
				if _, err := h.C.WaitStable(h.Cfg.Takeover); err != nil {
					return fmt.Errorf("after restarting %s: %w", id, err)
				}
			}
			return nil
		},
	},
	{
		Name: "rolling-restart-under-load", Family: FamProcess,
		Doc: "rolling-restart's deploy (n1, n2, n3: SIGTERM, restart, a stable cluster) while 100 messages a second, open loop, go to 1000 conversations beside the steady users: every message answered once (a busy refusal counts), no conversation locked, no quota breach",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.rollingRestartUnderLoad(r, 1000, 100, 10*time.Second)
		},
	},
	{
		Name: "bots-set-unbuildable-then-rolling-restart", Family: FamProcess,
		Doc: "`botctl bots set` of an openai backend whose key variable only the writer has (the nodes refuse it), then every node restarted one after another: every node comes up, says in /readyz it refused the override, and the bot keeps its file settings (the demo's answers); the override cleared after",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.botsSetUnbuildable(r)
		},
	},
	{
		Name: "many-bots", Family: FamProcess,
		Doc: "100 bots registered in the bot registry (etcd; every node has the cluster key), every node serving every one, each with one closed-loop user (think ~30 s: under 2 messages a second in all); after 30 s kill -9 the node leading the most of them and restart it 5 s later (the balancer moves bots back by graceful handovers), then, during the traffic, `botctl bots add` a bot (subscribed within 1 min, its first message answered), `botctl bots remove` one whose user awaits an answer (its user stopped first: an answer it owed is delivered or listed in the node's removal log line, nothing after is owed) and `botctl bots rotate-secret` another with the simulator's secret changed first (proved, 1 kick allowed); 60 s more traffic; every bot's messages judged as b1's (answered once, none lost, none locked, no 45009, no expired stream, no kick beyond the re-key's); then the fleet removed from the registry",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.manyBots(r, 100)
		},
	},
	{
		Name: "media-flood", Family: FamData,
		Doc: "the media store's bound set to 16 MB (as `nats stream edit` would), then a 1 MB file a second for 60 s over 20 conversations beside the steady users' text: the store fills to its bound, a file past it is refused and its user told storage is full, text keeps flowing; the bound put back after",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.mediaFlood(r, 16<<20, 1<<20, 20, time.Minute)
		},
	},
	{
		Name: "kill-nats-server", Family: FamNATS, Smoke: true,
		Doc: "kill -9 one NATS server (n1, n2, n3 in turn), restart it 10 s later",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.killMember(h.Infra.NATS[(r.Round-1)%len(h.Infra.NATS)], 10*time.Second)
		},
	},
	{
		Name: "churn-tasks-bucket", Family: FamNATS,
		Doc: "for 60 s, step the leader of the task records' stream (KV_BOTCTL_TASKS) down every 2 s: that one bucket fails on and off while the queue and every other bucket work; no conversation may stay locked past the deadline plus a sweep",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.churnStream(r, "KV_BOTCTL_TASKS", 60*time.Second, 2*time.Second)
		},
	},
	{
		Name: "freeze-nats-server", Family: FamNATS,
		Doc: "SIGSTOP the NATS server the leader is connected to for -freeze (5 min), then SIGCONT: the leader notices within seconds (nats.ping_interval) and reconnects to another server; answers keep flowing",
		Fault: func(h *Harness, r *RoundResult) error {
			n, err := h.Leader()
			if err != nil {
				return err
			}
			for i, p := range h.links[n.ID].NATS {
				if p.Conns() > 0 {
					// The reconnect, seen from outside: the leader's last
					// connection through its proxy to the frozen server
					// closes (nats.go declared it stale).
					frozen := time.Now()
					stop := make(chan struct{})
					left := make(chan time.Time, 1)
					go func() {
						for p.Conns() > 0 {
							select {
							case <-stop:
								return
							case <-time.After(50 * time.Millisecond):
							}
						}
						left <- time.Now()
					}()
					err := h.freezeMember(r, h.Infra.NATS[i])
					close(stop)
					select {
					case at := <-left:
						r.Settled = at
						r.note("the leader left the frozen server %.1fs after it froze", at.Sub(frozen).Seconds())
					default:
						r.note("the leader never left the frozen server")
					}
					return err
				}
			}
			return fmt.Errorf("leader %s has no open link to any NATS server", n.ID)
		},
	},
	{
		Name: "quorum-loss-nats", Family: FamNATS,
		Doc:    "kill -9 two of the three NATS servers (the leader's own and the next) for 60 s, then restart them: JetStream fails everywhere, the leader keeps its connection and spools, no node gives up its bots; once they are back every message is answered once",
		Settle: func(c *Config) time.Duration { return c.Settle + c.longest() + 60*time.Second },
		Fault: func(h *Harness, r *RoundResult) error {
			i, err := h.leaderNATSServer()
			if err != nil {
				return err
			}
			if i < 0 {
				i = (r.Round - 1) % len(h.Infra.NATS)
			}
			return h.quorumLoss(r, []*infracluster.Member{h.Infra.NATS[i], h.Infra.NATS[(i+1)%len(h.Infra.NATS)]}, time.Minute)
		},
	},
	{
		Name: "disk-full-nats", Family: FamNATS,
		Doc: "JetStream given 64 MB a server (max_file_store, the servers restarted one by one), the media store bounded at 24 MB and 24 MB reserved for the queue and buckets (the reservation stream's bound and media.reserve_bytes; the nodes restarted to match), then a 2 MB file a second for 90 s over 20 conversations (a busy conversation's file is deleted at once, so at most about 20 are held: 40 MB): media fills what it may, a file past it is refused and its user told, text keeps flowing; everything put back after",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.diskFullNATS(r, 64<<20, 24<<20, 24<<20, 2<<20, 20, 90*time.Second)
		},
	},
	{
		Name: "route-partition-leader-nats", Family: FamNATS,
		Doc: "cut the NATS server the leader is connected to off from its cluster for 90 s (its routes blackholed through their proxies; the leader's connection stays up, pings answered, every JetStream call failing): the leader moves its connection to another server after nats.jetstream_failover (30 s), or gives up its bots; every message answered once",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.routePartitionLeaderNATS(r, 90*time.Second)
		},
	},
	{
		Name: "rolling-nats-restart", Family: FamNATS,
		Doc: "a NATS upgrade as docs/operations.md has it: SIGTERM, restart, and before the next server wait until every stream's and consumer's replicas are current again (what the restarted server's /healthz says), server by server (n1, n2, n3); each wait is in the notes, one past 2 minutes fails the round",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.rollingNATSRestart(r, 2*time.Minute)
		},
	},
}

// killMember kills an etcd member or NATS server with SIGKILL, restarts
// it after down, and waits for the whole infra to be healthy again.
func (h *Harness) killMember(m *infracluster.Member, down time.Duration) error {
	h.Cfg.Logf("kill -9 %s", m.Name)
	m.Proc.Kill()
	time.Sleep(down)
	if err := h.Infra.Restart(m, time.Minute); err != nil {
		return fmt.Errorf("restart %s: %w", m.Name, err)
	}
	return h.Infra.WaitHealthy(time.Minute)
}

// freezeMember stops an etcd member or NATS server with SIGSTOP for
// Cfg.Freeze (its connections stay open and nothing answers), resumes it,
// and waits for the whole infra to be healthy again.
func (h *Harness) freezeMember(r *RoundResult, m *infracluster.Member) error {
	r.note("SIGSTOP %s for %s", m.Name, h.Cfg.Freeze)
	if err := m.Proc.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	time.Sleep(h.Cfg.Freeze)
	if err := m.Proc.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	return h.Infra.WaitHealthy(2 * time.Minute)
}

func scenarioByName(name string) (Scenario, bool) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}
