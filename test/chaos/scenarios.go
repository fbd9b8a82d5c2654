package main

import (
	"fmt"
	"syscall"
	"time"
)

// Scenario is one fault, injected while traffic runs. Fault returns once
// the fault has been applied (and, where the scenario says so, undone);
// anything it leaves dead, the next round's restore brings back. A new
// scenario is one entry here: the harness provides the traffic, the
// restore, the probes and every check.
type Scenario struct {
	Name string
	Doc  string
	// Extra scenarios run only when named (-scenarios, or "all"): they
	// are newer than the default matrix and not yet in make chaos.
	Extra bool
	// Kicks is how many connection replacements at the simulator the
	// fault itself makes unavoidable (a frozen leader cannot close its
	// socket before the new one subscribes); more are ping-pong.
	Kicks int64
	Fault func(h *Harness, r *RoundResult) error
}

// Scenarios are in run order. Still to add (issue 12): cut the leader off
// from etcd or NATS (pkg/faultproxy); a rolling NATS restart; simulator
// stall_acks, silence, revoke/restore; kill a worker mid-answer; kill the
// leader without restarting it.
var Scenarios = []Scenario{
	{
		Name: "kill-leader",
		Doc:  "kill -9 the leader's process group; restart it 5 s later",
		Fault: func(h *Harness, r *RoundResult) error {
			return h.killLeader(r, 5*time.Second)
		},
	},
	{
		Name: "term-leader",
		Doc:  "SIGTERM the leader (graceful stop); restart it once it has exited",
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
		Name: "rolling-restart",
		Doc:  "a deploy: SIGTERM, restart and wait for a stable cluster, node by node (n1, n2, n3)",
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
}

func init() {
	Scenarios = append(Scenarios,
		Scenario{
			Name: "stop-leader", Extra: true, Kicks: 1,
			Doc: "SIGSTOP the leader for TTL + 10 s, then SIGCONT (a paused VM)",
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
		Scenario{
			Name: "kill-etcd-member", Extra: true,
			Doc: "kill -9 one etcd member (e1, e2, e3 in turn), restart it 10 s later",
			Fault: func(h *Harness, r *RoundResult) error {
				return h.killMember(h.Infra.Etcd[(r.Round-1)%len(h.Infra.Etcd)], 10*time.Second)
			},
		},
		Scenario{
			Name: "kill-etcd-leader", Extra: true,
			Doc: "kill -9 the etcd member that is raft leader, restart it 10 s later",
			Fault: func(h *Harness, r *RoundResult) error {
				m, err := h.Infra.EtcdLeader()
				if err != nil {
					return err
				}
				return h.killMember(m, 10*time.Second)
			},
		},
		Scenario{
			Name: "kill-nats-server", Extra: true,
			Doc: "kill -9 one NATS server (n1, n2, n3 in turn), restart it 10 s later",
			Fault: func(h *Harness, r *RoundResult) error {
				return h.killMember(h.Infra.NATS[(r.Round-1)%len(h.Infra.NATS)], 10*time.Second)
			},
		},
		Scenario{
			Name: "sim-drop", Extra: true,
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
	)
}

// killMember kills an etcd member or NATS server with SIGKILL, restarts
// it after down, and waits for the whole infra to be healthy again.
func (h *Harness) killMember(m *Member, down time.Duration) error {
	h.Cfg.Logf("kill -9 %s", m.Name)
	m.Proc.Kill()
	time.Sleep(down)
	if err := h.Infra.Restart(m, time.Minute); err != nil {
		return fmt.Errorf("restart %s: %w", m.Name, err)
	}
	return h.Infra.WaitHealthy(time.Minute)
}

func scenarioByName(name string) (Scenario, bool) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}
