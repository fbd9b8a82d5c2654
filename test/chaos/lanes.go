package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/botctl/botctl/test/e2e/cluster"
	"github.com/botctl/botctl/test/infracluster"
)

// Lanes: with Config.Parallel > 1 the scenarios are dealt to that many
// lanes, each a cluster of its own (3 etcd members, 3 NATS servers, a
// simulator, 3 nodes: no process shared), which run side by side. A
// round of every scenario is then bounded by its longest lane instead of
// the sum (the three 5-minute freezes alone are 18 minutes in a row).
// Every lane judges its own messages; the report merges them.

// Harnesses are the lanes' clusters, in the run's work dir.
type Harnesses struct {
	Lanes []*Harness
	Dir   string // the run's work dir (binaries; one lane dir each)
}

// Close stops every lane's processes. The work dir stays if keep.
func (hs *Harnesses) Close(keep bool) {
	for _, h := range hs.Lanes {
		h.Close(true)
	}
	if !keep && hs.Dir != "" {
		os.RemoveAll(hs.Dir)
	}
}

// Dump is every lane's processes' stderr tails.
func (hs *Harnesses) Dump(lines int) string {
	var b strings.Builder
	for i, h := range hs.Lanes {
		if len(hs.Lanes) > 1 {
			fmt.Fprintf(&b, "=== lane %d\n", i+1)
		}
		b.WriteString(h.Dump(lines))
	}
	return b.String()
}

// Started reports whether any lane got as far as starting its nodes.
func (hs *Harnesses) Started() bool {
	for _, h := range hs.Lanes {
		if h.C != nil {
			return true
		}
	}
	return false
}

// estimate is about how long one round of s takes (bench/chaos.csv), to
// balance the lanes.
func estimate(s Scenario, cfg *Config) time.Duration {
	switch {
	case strings.HasPrefix(s.Name, "freeze-"):
		return cfg.Freeze + 70*time.Second
	case s.Name == "many-bots":
		return 330 * time.Second // measured: 323–330 s (a hundred bots registered, served, judged and removed)
	case s.Name == "disk-full-nats" || s.Name == "ai-backend-faults" || s.Name == "rolling-restart-under-load":
		return 400 * time.Second // servers or nodes restarted twice, or a long fault under load
	case s.Settle != nil || s.Name == "kill-worker-last-delivery" || s.Name == "clock-skew":
		return 200 * time.Second
	}
	return 100 * time.Second
}

// deal splits scenarios into n lanes, longest first onto the shortest
// lane; each lane keeps the scenarios' order.
func deal(scenarios []Scenario, n int, cfg *Config) [][]Scenario {
	n = max(1, min(n, len(scenarios)))
	idx := make([]int, len(scenarios))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		return estimate(scenarios[idx[a]], cfg) > estimate(scenarios[idx[b]], cfg)
	})
	load := make([]time.Duration, n)
	lane := make([]int, len(scenarios))
	for _, i := range idx {
		best := 0
		for l := range load {
			if load[l] < load[best] {
				best = l
			}
		}
		lane[i] = best
		load[best] += estimate(scenarios[i], cfg)
	}
	out := make([][]Scenario, n)
	for i, s := range scenarios {
		out[lane[i]] = append(out[lane[i]], s)
	}
	return out
}

// laneResult is what one lane ran and found.
type laneResult struct {
	rounds []*RoundResult
	late   []Violation
	err    string
}

// Run starts the lanes' clusters, runs every round and judges the run.
// stop, if not nil, ends the run early (after each lane's current round).
// The caller closes the harnesses (returned even when one failed to
// start, for its Dump).
func Run(cfg Config, stop <-chan os.Signal) (*Report, *Harnesses) {
	cfg.defaults()
	rep := newReport(cfg)
	start := time.Now()
	defer func() { rep.Took = time.Since(start) }()
	scenarios, err := selectScenarios(cfg.Scenarios)
	if err != nil {
		rep.Err = err.Error()
		return rep, &Harnesses{}
	}
	if cfg.Dir == "" {
		if cfg.Dir, err = os.MkdirTemp("", "botctl-chaos-"); err != nil {
			rep.Err = err.Error()
			return rep, &Harnesses{}
		}
	}
	hs := &Harnesses{Dir: cfg.Dir}
	rep.Cfg = cfg
	cfg.Logf("building botctl and infranode into %s", cfg.Dir)
	if cfg.bin, err = cluster.Build(cfg.Dir); err == nil {
		cfg.infraBin, err = infracluster.Build(cfg.Dir)
	}
	if err != nil {
		rep.Err = "build: " + err.Error()
		return rep, hs
	}
	quit := make(chan struct{})
	if stop != nil {
		go func() { <-stop; close(quit) }()
	}
	lanes := deal(scenarios, cfg.Parallel, &cfg)
	hs.Lanes = make([]*Harness, len(lanes))
	res := make([]laneResult, len(lanes))
	var wg sync.WaitGroup
	for i, ss := range lanes {
		lc := cfg
		if len(lanes) > 1 {
			lc.Dir = filepath.Join(cfg.Dir, fmt.Sprintf("lane%d", i+1))
			prefix, logf := fmt.Sprintf("lane %d: ", i+1), cfg.Logf
			lc.Logf = func(f string, a ...any) { logf(prefix+f, a...) }
			names := make([]string, len(ss))
			for j, s := range ss {
				names[j] = s.Name
			}
			cfg.Logf("lane %d: %s", i+1, strings.Join(names, ", "))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			hs.Lanes[i], res[i] = runLane(lc, ss, quit)
		}()
	}
	wg.Wait()
	order := map[string]int{}
	for i, s := range scenarios {
		order[s.Name] = i
	}
	for i, r := range res {
		rep.Rounds = append(rep.Rounds, r.rounds...)
		rep.Late = append(rep.Late, r.late...)
		if r.err != "" && rep.Err == "" {
			rep.Err = r.err
			if len(lanes) > 1 && r.err != "interrupted" {
				rep.Err = fmt.Sprintf("lane %d: %s", i+1, r.err)
			}
		}
	}
	sort.SliceStable(rep.Rounds, func(a, b int) bool {
		ra, rb := rep.Rounds[a], rep.Rounds[b]
		if ra.Round != rb.Round {
			return ra.Round < rb.Round
		}
		return order[ra.Scenario] < order[rb.Scenario]
	})
	return rep, hs
}

// runLane starts one cluster, runs its scenarios round by round (a run
// cut short still has rounds of every scenario) and judges its messages
// again at the end.
func runLane(cfg Config, scenarios []Scenario, quit <-chan struct{}) (*Harness, laneResult) {
	var res laneResult
	h, err := Start(cfg)
	if err != nil {
		res.err = "start: " + err.Error()
		cfg.Logf("%s\n%s", res.err, h.Dump(30))
		return h, res
	}
	for i := 1; i <= cfg.Rounds; i++ {
		for _, s := range scenarios {
			select {
			case <-quit:
				res.err = "interrupted"
				return h, res
			default:
			}
			r := h.RunRound(s, i)
			res.rounds = append(res.rounds, r)
			cfg.Logf("%s round %d: %d delivered, %d answered once (%d busy), %d violations, quota %d, expired %d, kicks %d, takeovers %v, push lag p99 %s ms %s",
				s.Name, i, r.Delivered, r.Answered, r.Busy, len(r.Violations), r.Quota, r.Expired, r.Kicks, r.Takeovers, pctMS(r.PushLag, .99), r.Err)
			for _, v := range r.Violations {
				cfg.Logf("  %s %s %s %q: %s", v.Invariant, v.User, v.MsgID, v.Question, v.Saw)
			}
		}
	}
	res.late, res.err = h.judgeAgain(res.rounds)
	return h, res
}

// judgeAgain judges every message of the lane's run once more: an answer
// may have arrived a second time after its round was checked (late
// duplicates are returned), and a missed message the backfill answered
// after its round was judged (the settle wait ran out) was answered: it
// counts as late, not missed.
func (h *Harness) judgeAgain(rounds []*RoundResult) ([]Violation, string) {
	roundOf := map[string]bool{}
	expect := map[string]bool{}
	for _, r := range rounds {
		for _, v := range r.Violations {
			roundOf[v.MsgID+v.Invariant] = true
		}
		for id := range r.ExpectFailed {
			expect[id] = true
		}
	}
	var errText string
	j, err := judgeRound(h.C, bot, h.Traffic.Messages(""), h.Traffic.Messages(""), expect)
	if err != nil {
		errText = "final check: " + err.Error()
	}
	late := h.judgeAgain2(roundOf, expect)
	now := map[string]bool{}
	for _, v := range j.violations {
		now[v.MsgID+v.Invariant] = true
		if v.Invariant == InvDuplicate && !roundOf[v.MsgID+v.Invariant] {
			late = append(late, v)
		}
	}
	for _, r := range rounds {
		kept := r.Violations[:0]
		for _, v := range r.Violations {
			if v.Invariant == InvMissed && !now[v.MsgID+InvMissed] {
				r.AnsweredAfter++
				continue
			}
			kept = append(kept, v)
		}
		r.Violations = kept
	}
	return late, errText
}
