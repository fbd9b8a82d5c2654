// Command chaos injects faults into a real botctl cluster under traffic
// and checks, from the WeCom simulator's side only, that users still get
// exactly one complete answer to every message.
//
//	go run ./test/chaos -rounds 10 -out bench/chaos.md
//
// Topology, all on loopback and each member its own process (so each can
// be kill -9'd, SIGTERM'd or SIGSTOPped): 3 etcd members and 3 NATS
// servers clustered with JetStream (test/infracluster; no_advertise, so a
// client dials only the URLs it was given), `botctl sim`, and three `botctl
// serve` nodes with --nats-replicas 3, all built from this tree. Every
// node reaches each etcd member and each NATS server through a fault
// proxy of its own (internal/faultproxy), so one node can be partitioned from
// etcd, NATS or both. The processes are started by test/e2e/cluster, the
// harness the end-to-end tests use.
//
// Per round of a scenario: closed-loop users talk to the bot through the
// simulator's control API (answers of 5–60 s, by question); the
// scenario's fault is injected; traffic goes
// on, then stops; answers get time to arrive; every stopped node is
// restarted; one probe message is sent in each conversation. The round is
// then judged from the simulator's transcripts and counters:
//
//   - every message WeCom delivered got exactly one answer: a finished bot
//     message holding the whole demo answer, or a busy refusal (the red
//     line: a refusal is an answer); none lost, none twice;
//   - every message WeCom took while no bot was connected (undelivered,
//     in its history) was answered later anyway (backfill owes it), or a
//     later bot message in its conversation carries the "may be
//     incomplete" note;
//   - where the fault made an answer impossible (every delivery of a task
//     killed), exactly one failure notice;
//   - the probe was answered in full (no conversation left locked);
//   - no 45009 (quota), no expired_updates (a stream updated after its
//     window), no kicks beyond those the fault forces (ping-pong);
//   - takeover: from the fault to the simulator's next subscribe of the bot.
//
// Besides the steady users, -burst conversations post one message each
// over the first second of every fault: the messages a leader receives
// while it dies or stops.
//
// At the end every message of the run is judged again, which catches an
// answer that arrived twice after its round was checked. The report
// (markdown, a CSV of rounds and a CSV of violations) says which message
// of which conversation broke what, and what the user saw. The exit code
// is 1 when an invariant broke: the harness is not tuned to pass.
//
// Every scenario in scenarios.go is in the default matrix (issue 12):
// botctl processes (kill -9 with and without restart, mid-download too,
// SIGTERM, SIGSTOP, rolling restart, also under 100 messages a second
// and after a `bots set` no node can build; a hundred bots of the bot
// registry through a node's kill -9, a bot added, one removed and one
// re-keyed with the CLI under traffic), network partitions of one
// node (leader from etcd, leader from NATS, a standby from both), etcd (a
// member, the raft leader, quorum lost), NATS (a server, a rolling
// restart, quorum lost, the storage filled by media, the leader's server
// cut off from its cluster), WeCom (drop, stalled acks, silence, revoked
// secret restored by a person), workers (kill -9 the one computing an
// answer; chase a task to its last delivery; an AI backend slow, failing
// and cut mid-stream behind its fallback and breaker) and stored data (a
// corrupt record, a flood of media).
//
// The traffic: closed-loop users of bot b1 (every fourth message quotes a
// small file, downloaded before its task runs) and of a second bot, b2,
// served by every node beside it (-users2, -media-every).
// -scenarios names a subset; -scenarios smoke is the smoke subset.
//
// `BOTCTL_CHAOS=1 go test -run TestChaosSmoke ./test/chaos` runs one
// round of the smoke subset with little traffic (make chaos-smoke, run by
// make test after the package tests).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	var cfg Config
	var scen, out string
	var keep bool
	flag.IntVar(&cfg.Rounds, "rounds", 10, "rounds per scenario")
	flag.IntVar(&cfg.Parallel, "parallel", 1, "lanes: clusters of their own (3 etcd, 3 NATS, a simulator, 3 nodes each) that run disjoint sets of scenarios side by side")
	flag.StringVar(&scen, "scenarios", "", "comma-separated scenarios, or smoke (the smoke subset); default all: "+scenarioNames())
	flag.IntVar(&cfg.Users, "users", 6, "concurrent conversations (closed-loop users)")
	flag.IntVar(&cfg.Users2, "users2", 2, "closed-loop users of the second bot, b2 (-1: no second bot)")
	flag.IntVar(&cfg.MediaEvery, "media-every", 4, "every closed-loop user's n-th message quotes a small file (-1: none)")
	flag.IntVar(&cfg.Burst, "burst", 6, "messages, one conversation each, posted over the first second of every fault (0: none)")
	flag.DurationVar(&cfg.Think, "think", 2*time.Second, "mean pause of a user between an answer and the next question")
	flag.DurationVar(&cfg.Patience, "patience", 15*time.Second, "a user with no answer after this asks again")
	flag.DurationVar(&cfg.AnswerTime, "answer-time", 5*time.Second, "--demo-answer-time of every node: the shortest answer")
	flag.DurationVar(&cfg.AnswerTimeMax, "answer-time-max", time.Minute, "--demo-answer-time-max: answers take answer-time to this, by question (issue 12: 5–60 s; 0: all answer-time)")
	flag.DurationVar(&cfg.TTL, "ttl", 20*time.Second, "--election-ttl (production default 20s)")
	flag.DurationVar(&cfg.Margin, "margin", 5*time.Second, "--election-safety-margin (production default 5s)")
	flag.DurationVar(&cfg.Warmup, "warmup", 4*time.Second, "traffic before the fault")
	flag.DurationVar(&cfg.After, "after", 10*time.Second, "traffic after the fault")
	flag.DurationVar(&cfg.Settle, "settle", 0, "how long answers may still arrive after traffic stops (default the longest answer + 60s)")
	flag.DurationVar(&cfg.Freeze, "freeze", 5*time.Minute, "how long the freeze-* scenarios freeze an etcd member, a link or a NATS server")
	flag.StringVar(&out, "out", "", "write the markdown report here (and .csv, -violations.csv beside it)")
	flag.BoolVar(&keep, "keep", false, "keep the work dir (binaries, data, a failed round's process logs) after the run")
	flag.StringVar(&cfg.Dir, "dir", "", "work dir (default a new temp dir)")
	flag.Parse()
	if cfg.Rounds < 1 || cfg.Users < 1 || cfg.Parallel < 1 {
		fmt.Fprintln(os.Stderr, "chaos: -rounds, -users and -parallel must be at least 1")
		os.Exit(2)
	}
	if scen != "" {
		cfg.Scenarios = strings.Split(scen, ",")
	}
	if _, err := selectScenarios(cfg.Scenarios); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	rep, hs := Run(cfg, sigs)
	hs.Close(keep)
	rep.Markdown(os.Stdout)
	if out != "" {
		if err := rep.WriteFiles(out); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: write report:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "chaos: report written to %s\n", out)
	}
	if rep.Failed() {
		os.Exit(1)
	}
}

func scenarioNames() string {
	var n []string
	for _, s := range Scenarios {
		if s.Smoke {
			n = append(n, s.Name+" (smoke)")
		} else {
			n = append(n, s.Name)
		}
	}
	return strings.Join(n, ", ")
}

// selectScenarios: none named (or "all") is every scenario; "smoke" is
// the smoke subset (one or two per fault family).
func selectScenarios(names []string) ([]Scenario, error) {
	if len(names) == 0 || (len(names) == 1 && (names[0] == "all" || names[0] == "smoke")) {
		smoke := len(names) == 1 && names[0] == "smoke"
		var out []Scenario
		for _, s := range Scenarios {
			if !smoke || s.Smoke {
				out = append(out, s)
			}
		}
		return out, nil
	}
	var out []Scenario
	for _, name := range names {
		s, ok := scenarioByName(strings.TrimSpace(name))
		if !ok {
			return nil, fmt.Errorf("unknown scenario %q (known: %s)", name, scenarioNames())
		}
		out = append(out, s)
	}
	return out, nil
}
