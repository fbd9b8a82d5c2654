package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/botctl/botctl/internal/faultproxy"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/test/e2e/cluster"
	"github.com/botctl/botctl/test/infracluster"
)

// Config is one chaos run.
type Config struct {
	Rounds    int      // rounds per scenario
	Scenarios []string // names; empty: all
	Users     int      // concurrent conversations
	// Users2 are the second bot's closed-loop users (bot2.go); 0: 2, -1:
	// no second bot.
	Users2 int
	// MediaEvery: every closed-loop user's MediaEvery-th message carries
	// a file (PostMedia); 0: 4, -1: none.
	MediaEvery int
	Think      time.Duration // a user's pause between an answer and the next question (mean)
	Patience   time.Duration // a user with no answer after this asks again
	Burst      int           // messages (one conversation each) posted over the first second of the fault
	AnswerTime time.Duration // --demo-answer-time of every node: the shortest answer
	// AnswerTimeMax is --demo-answer-time-max: answers take from
	// AnswerTime to this, by question (0: all AnswerTime).
	AnswerTimeMax time.Duration
	TTL           time.Duration // --election-ttl
	Margin        time.Duration // --election-safety-margin
	Warmup        time.Duration // traffic before the fault
	After         time.Duration // traffic after the fault
	Settle        time.Duration // how long answers may take to arrive after traffic stops
	Takeover      time.Duration // how long to wait for a new subscribe after a fault
	Freeze        time.Duration // how long the freeze-* scenarios freeze a member (issue 25: 5 minutes)
	Dir           string        // work dir (binaries, data); "" = a temp dir
	// Parallel is how many lanes (clusters of their own) run the
	// scenarios side by side (lanes.go); 0 or 1: one.
	Parallel      int
	bin, infraBin string // built once for every lane (Run); "": Start builds
	Logf          func(format string, args ...any)
}

// longest is the longest answer time.
func (c *Config) longest() time.Duration { return max(c.AnswerTime, c.AnswerTimeMax) }

func (c *Config) defaults() {
	if c.Rounds == 0 {
		c.Rounds = 10
	}
	if c.Users == 0 {
		c.Users = 6
	}
	if c.Users2 == 0 {
		c.Users2 = 2
	}
	if c.MediaEvery == 0 {
		c.MediaEvery = 4
	}
	if c.Think == 0 {
		c.Think = 2 * time.Second
	}
	if c.Patience == 0 {
		c.Patience = 15 * time.Second
	}
	if c.AnswerTime == 0 {
		c.AnswerTime = 5 * time.Second
	}
	if c.TTL == 0 {
		c.TTL = 20 * time.Second
	}
	if c.Margin == 0 {
		c.Margin = 5 * time.Second
	}
	if c.Warmup == 0 {
		c.Warmup = 4 * time.Second
	}
	if c.After == 0 {
		c.After = 10 * time.Second
	}
	if c.Settle == 0 {
		c.Settle = c.longest() + 60*time.Second
	}
	if c.Freeze == 0 {
		c.Freeze = 5 * time.Minute
	}
	if c.Takeover == 0 {
		c.Takeover = c.TTL + 30*time.Second
	}
	if c.Logf == nil {
		c.Logf = func(f string, a ...any) { fmt.Fprintf(os.Stderr, "chaos: "+f+"\n", a...) }
	}
}

const (
	bot       = "b1"
	nodeCount = 3
)

// Harness is the running cluster: 3 etcd members, 3 NATS servers,
// the simulator and 3 botctl nodes. Every node reaches every etcd member
// and every NATS server through a fault proxy of its own, so one node
// can be cut off from etcd, from NATS or from both.
type Harness struct {
	Cfg     Config
	Infra   *infracluster.Infra
	C       *cluster.Cluster
	Traffic *Traffic
	// Traffic2 is the second bot's (nil without one: Config.Users2 -1).
	Traffic2 *Traffic
	nodeIDs  []string
	links    map[string]*NodeLinks // node id → its proxies
	logDir   string                // every process's whole log
	keyFile  string                // the cluster key (secrets.key_file) of every node and of the CLI
	outputs  *outputWatch          // output versions, for the push lag
}

// NodeLinks are one node's fault proxies: one per etcd member and one per
// NATS server, in member order.
type NodeLinks struct {
	Etcd, NATS []*faultproxy.Proxy
}

func newNodeLinks(in *infracluster.Infra) (*NodeLinks, error) {
	l := &NodeLinks{}
	for _, m := range in.Etcd {
		p, err := faultproxy.New("127.0.0.1:0", strings.TrimPrefix(m.URL, "http://"))
		if err != nil {
			l.Close()
			return nil, err
		}
		l.Etcd = append(l.Etcd, p)
	}
	for _, m := range in.NATS {
		p, err := faultproxy.New("127.0.0.1:0", strings.TrimPrefix(m.URL, "nats://"))
		if err != nil {
			l.Close()
			return nil, err
		}
		l.NATS = append(l.NATS, p)
	}
	return l, nil
}

// EtcdURLs and NATSURLs are the node's --etcd and --nats.
func (l *NodeLinks) EtcdURLs() string { return joinProxies("http://", l.Etcd) }
func (l *NodeLinks) NATSURLs() string { return joinProxies("nats://", l.NATS) }

func joinProxies(scheme string, ps []*faultproxy.Proxy) string {
	var out []string
	for _, p := range ps {
		out = append(out, scheme+p.Addr())
	}
	return strings.Join(out, ",")
}

// Cut blackholes the node's links to etcd, NATS or both: connections stay
// open and no byte moves, as in a partition that drops packets.
func (l *NodeLinks) Cut(etcd, nats bool) {
	if etcd {
		for _, p := range l.Etcd {
			p.Blackhole()
		}
	}
	if nats {
		for _, p := range l.NATS {
			p.Blackhole()
		}
	}
}

// Heal ends every cut.
func (l *NodeLinks) Heal() {
	for _, p := range append(append([]*faultproxy.Proxy(nil), l.Etcd...), l.NATS...) {
		p.Heal()
	}
}

func (l *NodeLinks) Close() {
	for _, p := range append(append([]*faultproxy.Proxy(nil), l.Etcd...), l.NATS...) {
		p.Close()
	}
}

// Start builds botctl and infranode and starts everything.
func Start(cfg Config) (*Harness, error) {
	cfg.defaults()
	h := &Harness{Cfg: cfg}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "botctl-chaos-")
		if err != nil {
			return h, err
		}
		h.Cfg.Dir = d
	}
	dir := h.Cfg.Dir
	bin, infraBin := cfg.bin, cfg.infraBin
	var err error
	if bin == "" || infraBin == "" {
		cfg.Logf("building botctl and infranode into %s", dir)
		if bin, err = cluster.Build(dir); err != nil {
			return h, err
		}
		if infraBin, err = infracluster.Build(dir); err != nil {
			return h, err
		}
	}
	cfg.Logf("starting %d etcd members and %d NATS servers", nodeCount, nodeCount)
	logDir := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return h, err
	}
	h.logDir = logDir
	h.Infra, err = infracluster.Start(infracluster.Options{Bin: infraBin, Dir: filepath.Join(dir, "infra"), Size: nodeCount, Timeout: 2 * time.Minute, LogDir: logDir,
		RouteProxies: true}) // route-partition-leader-nats cuts one server's routes
	if err != nil {
		return h, err
	}
	// Every node has the cluster key, so it leads the bot registry's
	// bots (the many-bots scenario's); with none registered it changes
	// nothing.
	if h.keyFile, err = writeClusterKey(dir); err != nil {
		return h, err
	}
	h.C, err = cluster.Start(cluster.Options{
		Bin: bin, Dir: filepath.Join(dir, "nodes"), Bots: cfg.bots(), TTL: cfg.TTL, Margin: cfg.Margin,
		StartTimeout: 90 * time.Second,
		External:     &cluster.External{EtcdURLs: h.Infra.EtcdURLs(), NATSURL: h.Infra.NATSURLs()},
		NodeArgs:     nodeArgs(cfg),
		NodeEnv:      []string{keyEnv + "=" + h.keyFile},
		SimArgs:      []string{"--record"}, // frames' accept times, for the push lag
		LogDir:       logDir,
	})
	if err != nil {
		return h, err
	}
	h.links = map[string]*NodeLinks{}
	for i := 0; i < nodeCount; i++ {
		id := fmt.Sprintf("n%d", i+1)
		h.nodeIDs = append(h.nodeIDs, id)
		l, err := newNodeLinks(h.Infra)
		if err != nil {
			return h, err
		}
		h.links[id] = l
		if _, err := h.C.StartNodeWith(id, cluster.NodeOptions{EtcdURL: l.EtcdURLs(), NATSURL: l.NATSURLs()}); err != nil {
			return h, err
		}
	}
	if _, err := h.C.WaitStable(2 * time.Minute); err != nil {
		return h, err
	}
	if h.outputs, err = watchOutputs(h.Infra.NATSURLs()); err != nil {
		return h, fmt.Errorf("output watcher: %w", err)
	}
	h.Traffic = NewTraffic(h.C, bot, h.Cfg.Users, h.Cfg.Burst, h.Cfg.Think, h.Cfg.Patience, fmt.Sprintf("%x", time.Now().Unix()%0xfffff))
	h.Traffic.demo = ai.DemoConfig{AnswerTime: h.Cfg.AnswerTime, AnswerTimeMax: h.Cfg.AnswerTimeMax}
	h.Traffic.mediaEvery = h.Cfg.MediaEvery
	h.startTraffic2(h.Traffic.nonce)
	return h, nil
}

// nodeArgs are every node's flags besides its endpoints. The silence
// baseline may form after silenceMinWatched of traffic instead of the
// default 10 minutes, so a silence round early in a run (or in the smoke)
// is detected as it would be on a bot with some history.
func nodeArgs(cfg Config) []string {
	args := []string{"--ai", "demo", "--demo-answer-time", cfg.AnswerTime.String()}
	if cfg.AnswerTimeMax > cfg.AnswerTime {
		args = append(args, "--demo-answer-time-max", cfg.AnswerTimeMax.String())
	}
	// Debug: a broken message is traced through every step (the log
	// files in the work dir's logs/, grepped for it when a round fails).
	return append(args, "--nats-replicas", "3", "--health-silence-min-watched", silenceMinWatched.String(), "--log-level", "debug")
}

const silenceMinWatched = time.Minute

// Close stops every process. The work dir stays if keep.
func (h *Harness) Close(keep bool) {
	h.outputs.Close()
	if h.C != nil {
		h.C.Close()
	}
	for _, l := range h.links {
		l.Close()
	}
	if h.Infra != nil {
		h.Infra.Close()
	}
	if !keep && h.Cfg.Dir != "" {
		os.RemoveAll(h.Cfg.Dir)
	}
}

// Dump is every process's stderr tail, for a failed run.
func (h *Harness) Dump(lines int) string {
	var b strings.Builder
	if h.C != nil {
		b.WriteString(h.C.Dump(lines))
	}
	if h.Infra != nil {
		b.WriteString(h.Infra.Dump(lines))
	}
	return b.String()
}

// Leader waits for a stable cluster and returns the bot's leader node.
func (h *Harness) Leader() (*cluster.Node, error) {
	l, err := h.C.WaitStable(h.Cfg.Takeover)
	if err != nil {
		return nil, err
	}
	return h.C.Node(l[bot]), nil
}

// Takeover is one leader handover measured at the simulator: from the
// fault to the first subscribe of the bot after it.
type Takeover struct {
	From string
	D    time.Duration
	Err  string // no subscribe within Cfg.Takeover
}

// waitTakeover waits for the bot's first subscribe after t0.
func (h *Harness) waitTakeover(from string, t0 time.Time) Takeover {
	return h.waitTakeoverWithin(from, t0, h.Cfg.Takeover)
}

// waitTakeoverWithin is waitTakeover waiting up to within from t0.
func (h *Harness) waitTakeoverWithin(from string, t0 time.Time, within time.Duration) Takeover {
	sub, err := h.C.WaitSubscribed(bot, t0, within)
	if err != nil {
		return Takeover{From: from, Err: err.Error()}
	}
	return Takeover{From: from, D: sub.At.Sub(t0)}
}

// restore restarts every botctl node whose process is gone and waits for
// a stable cluster (one leader, connected, the others standbys).
func (h *Harness) restore() error {
	for _, l := range h.links {
		l.Heal()
	}
	for _, id := range h.nodeIDs {
		n := h.C.Node(id)
		select {
		case <-n.Proc.Done():
			if _, err := h.C.RestartNode(id); err != nil {
				return fmt.Errorf("restart %s: %w", id, err)
			}
		default:
		}
	}
	if _, err := h.C.WaitStable(2 * time.Minute); err != nil {
		return err
	}
	// Every round starts from a settled JetStream: a fault on a cluster
	// whose followers still catch up (the first round, seconds after the
	// buckets were made) is another fault than the one named.
	return h.Infra.WaitStreamsCurrent(2 * time.Minute)
}

// RoundResult is one round of one scenario.
type RoundResult struct {
	Scenario    string
	Round       int
	Start       time.Time
	Took        time.Duration
	Msgs        int // posted, probes included
	Delivered   int
	Undelivered int // WeCom had no connection to write the callback to
	PostErrors  int
	Answered    int // delivered and answered exactly once
	Busy        int // … of which by a busy refusal
	Takeovers   []Takeover
	Violations  []Violation
	Quota       int64 // 45009 during the round
	Expired     int64 // expired_updates during the round
	Kicks       int64 // connection replacements at the simulator
	KicksOK     int64 // … the fault makes unavoidable (Scenario.Kicks)
	Marked      int   // undelivered, unanswered, and told "may be incomplete" later in its conversation
	FailedTold  int   // messages the fault drove to an explicit failure notice, as the scenario expects
	// AnsweredAfter: missed when the round was judged, answered by the
	// backfill before the end of the run (late, but not lost).
	AnsweredAfter int
	Notes         []string
	// Evidence is what botctl logged about each broken message (filled
	// when the round failed): the smoke test prints it last, where a CI
	// excerpt of the output's tail still shows it.
	Evidence []string
	// ExpectFailed are msgids the fault made impossible to answer (every
	// delivery killed): one failure notice is their correct answer.
	ExpectFailed map[string]bool
	// PushLag: each frame showing an output version, from the worker's
	// write to the simulator's accept (pushlag.go); PushLagFault: those
	// accepted while the fault was on.
	PushLag, PushLagFault []time.Duration
	// Settled, if set by the fault, is when botctl had worked around it
	// (freeze-nats-server: the leader left the frozen server); output
	// written from then on counts in PushLagFault, else from the fault's
	// start.
	Settled time.Time
	Err     string // the round could not run to its end
}

// note records what the fault did, for the report.
func (r *RoundResult) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// Failed counts the round's broken invariants.
func (r *RoundResult) Failed() bool {
	return len(r.Violations) > 0 || r.Quota > 0 || r.Expired > 0 || r.PingPong() > 0 || r.Err != "" || r.takeoverErr()
}

// PingPong is the kicks beyond those the fault explains.
func (r *RoundResult) PingPong() int64 { return max(0, r.Kicks-r.KicksOK) }

func (r *RoundResult) takeoverErr() bool {
	for _, t := range r.Takeovers {
		if t.Err != "" {
			return true
		}
	}
	return false
}

// RunRound runs one round of s: traffic, the fault, more traffic, the
// settle wait, restore, a probe per conversation, and the checks.
func (h *Harness) RunRound(s Scenario, round int) *RoundResult {
	cfg := h.Cfg
	label := fmt.Sprintf("%s-r%d", s.Name, round)
	r := &RoundResult{Scenario: s.Name, Round: round, Start: time.Now(), KicksOK: s.Kicks}
	defer func() { r.Took = time.Since(r.Start) }()
	if err := h.restore(); err != nil {
		r.Err = "cluster not stable before the round: " + err.Error()
		return r
	}
	before, err := h.C.Stats(bot)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	before2 := h.stats2()
	if _, err := drainRecording(h.C.SimHTTP); err != nil { // the last round's frames
		r.note("recorder: %v", err)
	}

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	done2 := make(chan struct{})
	go func() { defer close(done); h.Traffic.Run(ctx, label) }()
	go func() { defer close(done2); h.run2(ctx, label) }()
	sleepCtx(context.Background(), cfg.Warmup)
	cfg.Logf("%s: fault", label)
	burst := make(chan struct{})
	go func() { defer close(burst); h.Traffic.Burst(label, time.Second) }()
	faultFrom := time.Now()
	ferr := s.Fault(h, r)
	faultTo := time.Now()
	<-burst
	sleepCtx(context.Background(), cfg.After)
	stop()
	<-done
	<-done2
	if ferr != nil {
		r.Err = "fault: " + ferr.Error()
	}

	// Answers owed for this round's messages may still be streaming.
	msgs := h.Traffic.Messages(label)
	settle := cfg.Settle
	if s.Settle != nil {
		settle = s.Settle(&cfg)
	}
	deadline := time.Now().Add(settle)
	for !(allAnswered(h.C, bot, msgs) && h.answered2(label)) && time.Now().Before(deadline) {
		time.Sleep(time.Second)
	}
	if err := h.restore(); err != nil && r.Err == "" {
		r.Err = "cluster not stable after the round: " + err.Error()
	}
	// No conversation left locked: a new message in each is answered.
	var probes []*Msg
	for _, u := range h.Traffic.Conversations() {
		probes = append(probes, h.Traffic.Post(label, u, true))
	}
	deadline = time.Now().Add(cfg.longest() + 45*time.Second)
	for !allAnswered(h.C, bot, probes) && time.Now().Before(deadline) {
		time.Sleep(time.Second)
	}
	// A probe refused as busy while its conversation still owed an answer
	// to an earlier message (a missed one, answered late by the backfill
	// once the conversation was free, after the settle ran out: a chain of
	// them in the chased conversation of kill-worker-last-delivery) shows
	// owed work, not a lock: once the conversation's messages are all
	// answered, a second probe asks again, and that one must be answered.
	var again []*Msg
	var owed []*Msg
	for _, p := range probes {
		own := h.Traffic.MessagesOf("", p.User)
		if refusedBusy(h.C, bot, p) && !allAnswered(h.C, bot, own) {
			p.Reprobed = true
			owed = append(owed, own...)
			r.note("%s's probe refused while the conversation still owed an earlier answer; probed again once it was in", p.User)
		}
	}
	wait := time.Now().Add(cfg.longest() + 45*time.Second)
	for len(owed) > 0 && !allAnswered(h.C, bot, owed) && time.Now().Before(wait) {
		time.Sleep(time.Second)
	}
	for _, p := range probes {
		if p.Reprobed {
			again = append(again, h.Traffic.Post(label, p.User, true))
		}
	}
	deadline = time.Now().Add(cfg.longest() + 45*time.Second)
	for len(again) > 0 && !allAnswered(h.C, bot, again) && time.Now().Before(deadline) {
		time.Sleep(time.Second)
	}

	msgs = h.Traffic.Messages(label)
	for _, m := range msgs {
		r.Msgs++
		switch {
		case m.PostErr != "":
			r.PostErrors++
		case m.Delivered:
			r.Delivered++
		default:
			r.Undelivered++
		}
	}
	j, err := judgeRound(h.C, bot, msgs, h.Traffic.Messages(""), r.ExpectFailed)
	if err != nil && r.Err == "" {
		r.Err = err.Error()
	}
	// Added to what the fault and the side bots judged (many-bots judges
	// its fleet in its fault, judge2 the second bot), never in place of it.
	r.Answered += j.answered
	r.Busy += j.busy
	r.Marked += j.marked
	r.FailedTold += j.failed
	r.Violations = append(r.Violations, j.violations...)
	h.judge2(r, label, before2)
	after, err := h.C.Stats(bot)
	if err != nil && r.Err == "" {
		r.Err = err.Error()
	}
	r.Quota += after.QuotaRejections - before.QuotaRejections
	r.Expired += after.ExpiredUpdates - before.ExpiredUpdates
	r.Kicks = after.Kicks - before.Kicks
	if ev, err := drainRecording(h.C.SimHTTP); err != nil {
		r.note("recorder: %v (no push lag)", err)
	} else {
		var worst string
		from := faultFrom
		if !r.Settled.IsZero() {
			from = r.Settled
		}
		r.PushLag, r.PushLagFault, worst = h.outputs.lags(ev, faultFrom, from, faultTo)
		if worst != "" {
			r.note("%s", worst)
		}
	}
	if r.Failed() {
		// The processes' logs, to find the cause (kept with -keep).
		path := filepath.Join(h.Cfg.Dir, label+".log")
		dump := h.Dump(maxDumpLines)
		if err := os.WriteFile(path, []byte(dump), 0o644); err == nil {
			cfg.Logf("%s: logs of every process in %s", label, path)
		}
		// What botctl logged about each broken message: the work dir is
		// gone after a CI run, this output is not.
		logs := h.logs(dump)
		for _, v := range r.Violations {
			vbot := bot // a side bot's violation names it: "<bot>/<user>"
			if b, _, ok := strings.Cut(v.User, "/"); ok {
				vbot = b
			}
			ev := fmt.Sprintf("%s %s %s (task %s): no log line names it", label, v.Invariant, v.MsgID, task.ID(vbot, v.MsgID))
			if lines := mentions(logs, v.MsgID, task.ID(vbot, v.MsgID)); lines != "" {
				ev = fmt.Sprintf("%s %s %s: log lines naming it:\n%s", label, v.Invariant, v.MsgID, lines)
			}
			r.Evidence = append(r.Evidence, ev)
			cfg.Logf("%s", ev)
		}
	}
	return r
}

// logs is every process's whole log (the files in logs/, each line after
// its file's name), or dump when there are none.
func (h *Harness) logs(dump string) string {
	files, _ := filepath.Glob(filepath.Join(h.logDir, "*.log"))
	if len(files) == 0 {
		return dump
	}
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(f), ".log")
		for _, line := range strings.Split(string(data), "\n") {
			if line != "" {
				b.WriteString(name + ": " + line + "\n")
			}
		}
	}
	return b.String()
}

// mentions returns the lines of logs naming any of ids (at most 40, ANSI
// colours removed).
func mentions(logs string, ids ...string) string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		for _, id := range ids {
			if id != "" && strings.Contains(line, id) {
				out = append(out, ansi.ReplaceAllString(line, ""))
				break
			}
		}
		if len(out) == 40 {
			break
		}
	}
	return strings.Join(out, "\n")
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// maxDumpLines is how many stderr lines of each process a failed round
// writes to its log file.
const maxDumpLines = 2000

// simFault posts a fault for the bot to the simulator's control API.
func (h *Harness) simFault(action string, seconds int) error {
	body, _ := json.Marshal(map[string]any{"bot_id": bot, "action": action, "seconds": seconds})
	resp, err := http.Post(h.C.SimHTTP+"/control/faults", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST /control/faults %s: %s: %s", action, resp.Status, b)
	}
	return nil
}

// ---- faults on botctl nodes, shared by scenarios ----

// killLeader kills the leader's process group with SIGKILL, measures the
// takeover, and restarts the node after restartAfter (0: not restarted
// here; restore does it before the next round).
func (h *Harness) killLeader(r *RoundResult, restartAfter time.Duration) error {
	n, err := h.Leader()
	if err != nil {
		return err
	}
	t0 := time.Now()
	n.Proc.Kill()
	restarted := make(chan error, 1)
	if restartAfter > 0 {
		go func() {
			time.Sleep(time.Until(t0.Add(restartAfter)))
			_, err := h.C.RestartNode(n.ID)
			restarted <- err
		}()
	} else {
		restarted <- nil
	}
	r.Takeovers = append(r.Takeovers, h.waitTakeover(n.ID, t0))
	if err := <-restarted; err != nil {
		return fmt.Errorf("restart %s: %w", n.ID, err)
	}
	return nil
}

// stopNode sends SIGTERM to node id, measures the takeover if it led, and
// waits for its exit (a SIGKILL after 30 s, reported as an error).
func (h *Harness) stopNode(r *RoundResult, id string) error {
	leader, err := h.Leader()
	if err != nil {
		return err
	}
	n := h.C.Node(id)
	t0 := time.Now()
	if err := n.Proc.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if leader.ID == id {
		r.Takeovers = append(r.Takeovers, h.waitTakeover(id, t0))
	}
	if _, err := n.Proc.Wait(30 * time.Second); err != nil {
		n.Proc.Kill()
		return fmt.Errorf("node %s did not exit within 30s of SIGTERM (killed)", id)
	}
	return nil
}
