package main

import (
	"fmt"
	"time"
)

// Scenario is one fault, injected while traffic runs. Fault returns once
// the fault has been applied (and, where the scenario says so, undone);
// anything it leaves dead, the next round's restore brings back. A new
// scenario is one entry here: the harness provides the traffic, the
// restore, the probes and every check.
type Scenario struct {
	Name  string
	Doc   string
	Fault func(h *Harness, r *RoundResult) error
}

// Scenarios are in run order. Still to add (issue 12): SIGSTOP the leader
// for TTL+10s; cut the leader off from etcd or NATS (pkg/faultproxy); kill
// an etcd member / the etcd leader member (Infra.Restart is there for it);
// kill a NATS server; a rolling NATS restart; simulator faults (drop,
// stall_acks, silence, revoke/restore via POST /control/faults); kill a
// worker mid-answer.
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

func scenarioByName(name string) (Scenario, bool) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}
