package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Report is a whole run: what ran where, and every round's result.
type Report struct {
	Command   string
	Date      time.Time
	Took      time.Duration
	Nproc     int
	GoVersion string
	Commit    string
	Cfg       Config
	Rounds    []*RoundResult
	// Late are violations found when every message of the run was judged
	// again at the end (an answer arriving after its round was checked).
	Late []Violation
	Err  string // the run stopped early
}

func newReport(cfg Config) *Report {
	return &Report{
		Command: command(), Date: time.Now().UTC(), Nproc: runtime.NumCPU(),
		GoVersion: runtime.Version(), Commit: gitCommit(), Cfg: cfg,
	}
}

func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += " (with uncommitted changes)"
	}
	return c
}

// Failed is true when any invariant broke or a round could not run.
func (rep *Report) Failed() bool {
	return rep.Err != "" || len(rep.Late) > 0 || rep.roundFailed()
}

// roundFailed reports whether a round broke an invariant.
func (rep *Report) roundFailed() bool {
	for _, r := range rep.Rounds {
		if r.Failed() {
			return true
		}
	}
	return false
}

type scenarioSum struct {
	name                                             string
	rounds, failed                                   int
	msgs, delivered, undelivered, postErrs, answered int
	busy, marked, failedTold, answeredAfter          int
	inv                                              map[string]int
	quota, expired, kicks                            int64
	takeovers                                        []time.Duration
	takeoverErrs                                     int
	errs                                             int
	pushLag, pushLagFault                            []time.Duration
}

func (rep *Report) sums() []*scenarioSum {
	var out []*scenarioSum
	by := map[string]*scenarioSum{}
	for _, r := range rep.Rounds {
		s := by[r.Scenario]
		if s == nil {
			s = &scenarioSum{name: r.Scenario, inv: map[string]int{}}
			by[r.Scenario] = s
			out = append(out, s)
		}
		s.rounds++
		if r.Failed() {
			s.failed++
		}
		s.msgs += r.Msgs
		s.delivered += r.Delivered
		s.undelivered += r.Undelivered
		s.postErrs += r.PostErrors
		s.answered += r.Answered
		s.busy += r.Busy
		s.marked += r.Marked
		s.failedTold += r.FailedTold
		s.answeredAfter += r.AnsweredAfter
		for _, v := range r.Violations {
			s.inv[v.Invariant]++
		}
		s.quota += r.Quota
		s.expired += r.Expired
		s.kicks += r.Kicks
		for _, t := range r.Takeovers {
			if t.Err != "" {
				s.takeoverErrs++
			} else {
				s.takeovers = append(s.takeovers, t.D)
			}
		}
		if r.Err != "" {
			s.errs++
		}
		s.pushLag = append(s.pushLag, r.PushLag...)
		s.pushLagFault = append(s.pushLagFault, r.PushLagFault...)
	}
	return out
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// pctMS is pct in milliseconds, "–" without samples (a fault that moves
// no leader).
func pctMS(ds []time.Duration, p float64) string {
	if len(ds) == 0 {
		return "–"
	}
	return ms(pct(ds, p))
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func passFail(n int64) string {
	if n == 0 {
		return "pass"
	}
	return fmt.Sprintf("**FAIL (%d)**", n)
}

// Markdown writes the human report.
func (rep *Report) Markdown(w io.Writer) {
	cfg := rep.Cfg
	verdict := "all invariants held"
	switch {
	case rep.Err == "interrupted" && len(rep.Late) == 0 && !rep.roundFailed():
		// Stopped on purpose (SIGINT): not a failure of botctl's.
		verdict = "interrupted; every invariant held in the rounds that ran"
	case rep.Failed():
		verdict = "**invariants broken** (details below)"
	}
	fmt.Fprintf(w, "# Chaos run: %s\n\n", verdict)
	fmt.Fprintf(w, "- command: `%s`\n- date: %s (took %s)\n- machine: nproc %d, %s, %s/%s\n- commit: %s\n",
		rep.Command, rep.Date.Format(time.RFC3339), rep.Took.Round(time.Second), rep.Nproc, rep.GoVersion, runtime.GOOS, runtime.GOARCH, rep.Commit)
	fmt.Fprintf(w, "- topology (loopback, every member its own process): 3 etcd members, 3 NATS servers clustered with JetStream "+
		"(`--nats-replicas 3`, servers started with no_advertise, each route between two servers through a fault proxy of that pair's own), `botctl sim`, 3 `botctl serve` nodes; every node reaches each etcd member and each NATS server "+
		"through a fault proxy of its own (internal/faultproxy), so one node can be cut off from etcd, NATS or both\n")
	fmt.Fprintf(w, "- nodes: `%s --election-ttl %s --election-safety-margin %s`\n", strings.Join(nodeArgs(cfg), " "), cfg.TTL, cfg.Margin)
	fmt.Fprintf(w, "- traffic: %d closed-loop users (one single chat each), think time ~%s, %s before the fault and %s after it; "+
		"%d more conversations post one message each over the fault's first second; "+
		"answers may take %s more after traffic stops; then one probe message per conversation (a question whose answer is in the quickest tenth of the range: it asks whether the conversation still takes a question)\n\n",
		cfg.Users, cfg.Think, cfg.Warmup, cfg.After, cfg.Burst, cfg.Settle)
	if cfg.Users2 > 0 || cfg.MediaEvery > 0 {
		fmt.Fprintf(w, "- beside it: %d closed-loop users of a second bot (%s, served by every node, judged the same way); every closed-loop user's message %d in %d quotes a 2 KB file (downloaded by the leader before its task runs; -1: none)\n\n",
			max(cfg.Users2, 0), bot2, 1, cfg.MediaEvery)
	}
	if rep.Err != "" {
		fmt.Fprintf(w, "**The run stopped early:** %s\n\n", rep.Err)
	}

	fmt.Fprintf(w, "Every check reads the simulator (transcripts and `/control/stats`), never botctl. A delivered message "+
		"is owed exactly one answer: a finished bot message holding the whole `ai.DemoAnswer` text (stream reply or proactive push), "+
		"or a busy refusal (the conversation already had a task; the red line says that is an answer). A message WeCom took while no "+
		"connection got it (undelivered) is owed an answer by the backfill, or an explicit \"may be incomplete\" note at the start of a later "+
		"bot message in its conversation (counted as marked). Only where the fault made an answer impossible (every delivery of the task "+
		"killed) is one failure notice the correct answer. Users are closed-loop: "+
		"each waits for its answer, but asks again after %s without one, as people do.\n\n", cfg.Patience)
	fmt.Fprintf(w, "| scenario | rounds | failed rounds | msgs | delivered | answered once (busy) | lost | failure notice only | duplicate | locked conv. | expired streams | 45009 | kicks | undelivered | missed (undelivered, never answered) | answered after its round | marked incomplete | failure told (expected) | post errors | takeover p50 ms | p99 ms | max ms | n | no takeover |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range rep.sums() {
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d (%d) | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %s | %s | %s | %d | %d |\n",
			s.name, s.rounds, s.failed, s.msgs, s.delivered, s.answered, s.busy, s.inv[InvLost], s.inv[InvFailed], s.inv[InvDuplicate], s.inv[InvLocked],
			s.expired, s.quota, s.kicks, s.undelivered, s.inv[InvMissed], s.answeredAfter, s.marked, s.failedTold, s.postErrs,
			pctMS(s.takeovers, .5), pctMS(s.takeovers, .99), pctMS(s.takeovers, 1), len(s.takeovers), s.takeoverErrs)
	}

	rep.pushLagTable(w)

	var tot = map[string]int64{}
	for _, r := range rep.Rounds {
		for _, v := range r.Violations {
			tot[v.Invariant]++
		}
		tot[InvQuota] += r.Quota
		tot[InvExpired] += r.Expired
		tot[InvPingPong] += r.PingPong()
	}
	tot[InvDuplicate] += int64(countInv(rep.Late, InvDuplicate))
	fmt.Fprintf(w, "\n## Invariants\n\n")
	fmt.Fprintf(w, "- every delivered message answered, none lost: %s\n", passFail(tot[InvLost]))
	fmt.Fprintf(w, "- no message answered only by a failure notice (where the fault left an answer possible): %s\n", passFail(tot[InvFailed]))
	fmt.Fprintf(w, "- none answered twice (late duplicates included): %s\n", passFail(tot[InvDuplicate]))
	fmt.Fprintf(w, "- no conversation left locked (the probe after each round is answered): %s\n", passFail(tot[InvLocked]))
	fmt.Fprintf(w, "- no stream updated after its window (expired_updates, and expired transcript entries): %s\n", passFail(tot[InvExpired]))
	fmt.Fprintf(w, "- no quota violation (45009): %s\n", passFail(tot[InvQuota]))
	fmt.Fprintf(w, "- no ping-pong (simulator kicks beyond those the fault forces, e.g. 1 when the old leader is frozen): %s\n", passFail(tot[InvPingPong]))
	fmt.Fprintf(w, "- every message WeCom took while no bot was connected (undelivered) answered later by the backfill, or marked \"may be incomplete\": %s\n", passFail(tot[InvMissed]))
	for _, r := range rep.Rounds {
		if r.Scenario == "many-bots" {
			fmt.Fprintf(w, "- a bot added to the registry at run time served and answered within its bound, a rotated secret proved (many-bots): %s\n", passFail(tot[InvUnserved]))
			break
		}
	}
	fmt.Fprintf(w, "\nAn undelivered message is in WeCom's history (`/control/history`) but was never written to a connection; "+
		"the architecture's inbound compensation owes it an answer or an explicit \"may be incomplete\" mark (pkg/pusher's IncompleteNote "+
		"on a later bot message of the same conversation).\n")
	fmt.Fprintf(w, "\n## Scenarios\n\n| scenario | family | smoke | what the fault does |\n|---|---|---|---|\n")
	ran := map[string]bool{}
	for _, r := range rep.Rounds {
		ran[r.Scenario] = true
	}
	for _, s := range Scenarios {
		if ran[s.Name] {
			doc := s.Doc
			if s.Settle != nil {
				doc += fmt.Sprintf(" (answers may take %s after traffic stops)", s.Settle(&cfg))
			}
			fmt.Fprintf(w, "| %s | %s | %v | %s |\n", s.Name, s.Family, s.Smoke, mdEscape(doc))
		}
	}

	fmt.Fprintf(w, "\n## Rounds\n\n| scenario | round | took s | delivered | answered once | violations | takeovers ms | fault | error |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Rounds {
		var tk []string
		for _, t := range r.Takeovers {
			if t.Err != "" {
				tk = append(tk, "from "+t.From+": none")
			} else {
				tk = append(tk, "from "+t.From+": "+ms(t.D))
			}
		}
		fmt.Fprintf(w, "| %s | %d | %.0f | %d | %d | %d | %s | %s | %s |\n", r.Scenario, r.Round, r.Took.Seconds(), r.Delivered, r.Answered,
			len(r.Violations)+int(r.Quota+r.Expired+r.PingPong()), strings.Join(tk, ", "), mdEscape(strings.Join(r.Notes, "; ")), mdEscape(r.Err))
	}

	fmt.Fprintf(w, "\n## Violations\n\n")
	n := 0
	for _, r := range rep.Rounds {
		for _, v := range r.Violations {
			n++
			if n <= 200 {
				fmt.Fprintf(w, "- %s r%d **%s**: conversation `%s`, msgid `%s`, question %q; the user saw: %s\n",
					r.Scenario, r.Round, v.Invariant, v.User, v.MsgID, v.Question, mdEscape(v.Saw))
			}
		}
	}
	for _, v := range rep.Late {
		n++
		if n <= 200 {
			fmt.Fprintf(w, "- found at the end of the run **%s**: conversation `%s`, msgid `%s`, question %q; the user saw: %s\n",
				v.Invariant, v.User, v.MsgID, v.Question, mdEscape(v.Saw))
		}
	}
	switch {
	case n == 0:
		fmt.Fprintf(w, "None.\n")
	case n > 200:
		fmt.Fprintf(w, "\n… %d more in the violations CSV.\n", n-200)
	}
}

func countInv(vs []Violation, inv string) int {
	n := 0
	for _, v := range vs {
		if v.Invariant == inv {
			n++
		}
	}
	return n
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// WriteFiles writes out (markdown), out's .csv (one row per round),
// -violations.csv and -takeover.png (takeover times per scenario) next to
// it.
func (rep *Report) WriteFiles(out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	rep.Markdown(f)
	if err := f.Close(); err != nil {
		return err
	}
	base := strings.TrimSuffix(out, filepath.Ext(out))
	if err := takeoverPlot(base+"-takeover.png", rep.Rounds); err != nil {
		return fmt.Errorf("takeover plot: %w", err)
	}
	rows := [][]string{{"scenario", "round", "start", "took_ms", "msgs", "delivered", "undelivered", "post_errors", "answered_once", "busy",
		"lost", "failed", "duplicate", "locked", "missed", "answered_after_round", "marked_incomplete", "failure_told", "expired", "quota_45009", "kicks", "takeovers_ms",
		"push_lag_frames", "push_lag_p50_ms", "push_lag_p99_ms", "push_lag_max_ms", "push_lag_fault_frames", "push_lag_fault_p99_ms", "fault", "error"}}
	for _, r := range rep.Rounds {
		inv := map[string]int{}
		for _, v := range r.Violations {
			inv[v.Invariant]++
		}
		var tk []string
		for _, t := range r.Takeovers {
			if t.Err != "" {
				tk = append(tk, "none")
			} else {
				tk = append(tk, ms(t.D))
			}
		}
		rows = append(rows, []string{r.Scenario, strconv.Itoa(r.Round), r.Start.UTC().Format(time.RFC3339), ms(r.Took),
			strconv.Itoa(r.Msgs), strconv.Itoa(r.Delivered), strconv.Itoa(r.Undelivered), strconv.Itoa(r.PostErrors), strconv.Itoa(r.Answered), strconv.Itoa(r.Busy),
			strconv.Itoa(inv[InvLost]), strconv.Itoa(inv[InvFailed]), strconv.Itoa(inv[InvDuplicate]), strconv.Itoa(inv[InvLocked]), strconv.Itoa(inv[InvMissed]), strconv.Itoa(r.AnsweredAfter), strconv.Itoa(r.Marked), strconv.Itoa(r.FailedTold), strconv.Itoa(inv[InvExpired] + int(r.Expired)),
			strconv.FormatInt(r.Quota, 10), strconv.FormatInt(r.Kicks, 10), strings.Join(tk, ";"),
			strconv.Itoa(len(r.PushLag)), pctMS(r.PushLag, .5), pctMS(r.PushLag, .99), pctMS(r.PushLag, 1), strconv.Itoa(len(r.PushLagFault)), pctMS(r.PushLagFault, .99),
			strings.Join(r.Notes, "; "), r.Err})
	}
	if err := writeCSV(base+".csv", rows); err != nil {
		return err
	}
	vrows := [][]string{{"scenario", "round", "invariant", "conversation", "msgid", "question", "saw"}}
	for _, r := range rep.Rounds {
		for _, v := range r.Violations {
			vrows = append(vrows, []string{r.Scenario, strconv.Itoa(r.Round), v.Invariant, v.User, v.MsgID, v.Question, v.Saw})
		}
	}
	for _, v := range rep.Late {
		vrows = append(vrows, []string{"(end of run)", "", v.Invariant, v.User, v.MsgID, v.Question, v.Saw})
	}
	return writeCSV(base+"-violations.csv", vrows)
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.WriteAll(rows)
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// command is how this run was started, as a person would type it: a
// binary that `go run` built in its cache is named by its package.
func command() string {
	args := append([]string(nil), os.Args...)
	if strings.Contains(args[0], "go-build") {
		args[0] = "go run ./test/chaos"
	}
	return strings.Join(args, " ")
}

// pushLagTarget is bench/push.md's target for progress frames (5,000
// conversations on three nodes).
const pushLagTarget = 3 * time.Second

// pushLagTable: does output keep reaching users while the fault is on,
// and how late (pushlag.go says how it is measured).
func (rep *Report) pushLagTable(w io.Writer) {
	fmt.Fprintf(w, "\n## Push lag\n\nA worker's write of an answer's output (`Output.Updated`, seen by a watcher on the output bucket over its own "+
		"connection to every NATS server) to the simulator's accept of the frame showing exactly that text (`botctl sim --record`), "+
		"for every frame that shows an output version (progress and final; receipts, heartbeats and notes match none). "+
		"\"During the fault\" are the frames showing output written between the fault's start and its end (the freeze-* scenarios: the whole freeze and "+
		"the wait for a healthy cluster after it; freeze-nats-server: from when the leader left the frozen server, the reconnect, as its proxy saw it; "+
		"the round's notes say how long that took). "+
		"Target (bench/push.md): p99 ≤ %s.\n\n", pushLagTarget)
	fmt.Fprintf(w, "| scenario | frames | p50 ms | p99 ms | max ms | frames during the fault | p99 ms | max ms | p99 within %s |\n|---|---|---|---|---|---|---|---|---|\n", pushLagTarget)
	for _, s := range rep.sums() {
		ok := "–"
		if len(s.pushLag) > 0 {
			ok = "yes"
			if pct(s.pushLag, .99) > pushLagTarget || (len(s.pushLagFault) > 0 && pct(s.pushLagFault, .99) > pushLagTarget) {
				ok = "**no**"
			}
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %d | %s | %s | %s |\n", s.name, len(s.pushLag), pctMS(s.pushLag, .5), pctMS(s.pushLag, .99), pctMS(s.pushLag, 1),
			len(s.pushLagFault), pctMS(s.pushLagFault, .99), pctMS(s.pushLagFault, 1), ok)
	}
}
