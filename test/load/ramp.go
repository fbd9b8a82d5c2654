package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
	proc "github.com/botctl/botctl/test/e2e/cluster"
)

// step is one load level of the ramp: conversations conversations, each
// asking one question, opened at rate new messages per second; the demo
// backend answers each in answer.
type step struct {
	spec          string
	kind          string // "botctl" or "naive"
	nodes         int    // botctl nodes (kind botctl)
	conversations int
	rate          float64
	answer        time.Duration
	profile       bool // profile the main processes during the step (perf, pprof)
}

// parseSteps reads "[naive:|Nnode:]C@R/A,…", e.g. "5000@500/30s",
// "1node:3000@500/5s", "naive:1000@200/60s". A "+" suffix profiles the
// step: perf from outside, and each process's own CPU and allocation
// profiles (pprof.go).
func parseSteps(s string) ([]step, error) {
	var out []step
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		st := step{spec: f, kind: "botctl", nodes: 3}
		if strings.HasSuffix(f, "+") {
			st.profile, f = true, strings.TrimSuffix(f, "+")
			st.spec = f
		}
		if k, rest, ok := strings.Cut(f, ":"); ok {
			f = rest
			switch {
			case k == "naive":
				st.kind, st.nodes = "naive", 0
			case strings.HasSuffix(k, "node"):
				n, err := strconv.Atoi(strings.TrimSuffix(k, "node"))
				if err != nil || n < 1 {
					return nil, fmt.Errorf("step %q: want naive: or Nnode: before the load", st.spec)
				}
				st.nodes = n
			default:
				return nil, fmt.Errorf("step %q: unknown kind %q (want naive or Nnode)", st.spec, k)
			}
		}
		c, rest, ok1 := strings.Cut(f, "@")
		r, a, ok2 := strings.Cut(rest, "/")
		var err1, err2, err3 error
		st.conversations, err1 = strconv.Atoi(c)
		st.rate, err2 = strconv.ParseFloat(r, 64)
		st.answer, err3 = time.ParseDuration(a)
		if !ok1 || !ok2 || errors.Join(err1, err2, err3) != nil || st.conversations <= 0 || st.rate <= 0 || st.answer <= 0 {
			return nil, fmt.Errorf("step %q: want CONVERSATIONS@RATE/ANSWER, e.g. 5000@500/30s", st.spec)
		}
		out = append(out, st)
	}
	return out, nil
}

// frame is one accepted frame, compact.
type frame struct {
	at     time.Time
	hash   string
	finish bool
}

// convo is one conversation as the simulator saw it.
type convo struct {
	msgid    string
	asked    time.Time // callback written to the bot's WebSocket
	frames   []frame
	expected string // hash of the complete answer
}

// stepResult is everything measured in one step.
type stepResult struct {
	step
	leader                string
	gen                   generated
	wall                  time.Duration // measured window: first post → all answered (or deadline)
	timedOut              bool
	receipt               dist
	receiptMissing        int
	progressLag, finalLag dist
	// The final lag split by the record's exec → succeeded time (the
	// worker's clock, the same machine): the worker's part (the answer's
	// last output write → its Finish recorded) and the rest (the notice,
	// the pusher's step, the intent's write, the frame).
	finalWorker, finalPusher dist
	completion               dist // asked → complete answer accepted
	answered, lost, dup      int
	heartbeats               int
	framesTotal              int
	maxPer60                 int
	peakLive                 int     // asked and not yet completely answered, at once
	peakAnswering            int     // of those, with output written (a worker on it)
	throughput               float64 // answers per second, first ask → last answer
	quota, expired, invalid  int64
	usage                    map[string]usage
	idle                     map[string]usage // the same processes before the first message
	idleWall                 time.Duration
	versions                 int
	profiles                 map[string]string      // role → perf summary
	pprof                    map[string]pprofResult // role → its CPU and allocation profiles
	subjects                 map[string]int         // NATS messages by kind of subject (-subjects)
	ops                      *opCount               // the same by kind of operation, with bytes (-subjects)
	harnessWatch             map[string]int         // deliveries to the load harness's own watches, by kind
	// leaderReceipt is the leader's own receipt histogram
	// (botctl_receipt_latency_seconds: callback read → WeCom's ack),
	// scraped at the step's end: botctl's share of the receipt apart
	// from the transport's. Empty when the scrape failed (leaderErr).
	leaderReceipt histogram
	leaderStages  map[string]histogram // botctl_inbound_stage_seconds by stage
	leaderInbound string               // botctl_inbound_total's samples ("labels value; …")
	leaderErr     string
	err           string
	// For the timeline (rampreport.go): the sampler's readings, each
	// receipt with when its callback was written, and when each answer
	// began and ended being written.
	ticks     []tick
	receiptAt []timed
	answerAt  []span
}

// timed is a latency and when its measure began.
type timed struct {
	at time.Time
	d  time.Duration
}

// span is a stretch of time.
type span struct{ from, to time.Time }

// cores is role's CPU over the window in cores.
func (r *stepResult) cores(role string) float64 {
	return r.usage[role].CPU.Seconds() / r.wall.Seconds()
}

// perMsg is role's CPU per message (conversation) in ms.
func (r *stepResult) perMsg(role string) float64 {
	return float64(r.usage[role].CPU) / float64(time.Millisecond) / float64(r.conversations)
}

// otherCores is the CPU the machine spent outside the measured processes
// over the window, in cores.
func (r *stepResult) otherCores() float64 { return r.cores(otherRole) }

// idleCores is role's CPU in cores before the first message.
func (r *stepResult) idleCores(role string) float64 {
	if r.idleWall <= 0 {
		return 0
	}
	return r.idle[role].CPU.Seconds() / r.idleWall.Seconds()
}

// marginalPerMsg is role's CPU per message in ms beyond its idle cost
// over the same window.
func (r *stepResult) marginalPerMsg(role string) float64 {
	extra := r.usage[role].CPU.Seconds() - r.idleCores(role)*r.wall.Seconds()
	return max(0, extra) * 1000 / float64(r.conversations)
}

// roles are the measured processes, in report order.
func (r *stepResult) roles() []string {
	var rs []string
	for k := range r.usage {
		if k != otherRole {
			rs = append(rs, k)
		}
	}
	order := func(s string) int {
		switch {
		case strings.HasPrefix(s, "leader"), s == "naive bot":
			return 0
		case strings.HasPrefix(s, "worker"):
			return 1
		case memberOf(s, etcdRole):
			return 2
		case memberOf(s, natsRole):
			return 3
		case s == "sim":
			return 4
		}
		return 5
	}
	sort.Slice(rs, func(i, j int) bool {
		if order(rs[i]) != order(rs[j]) {
			return order(rs[i]) < order(rs[j])
		}
		return rs[i] < rs[j]
	})
	return rs
}

// workerCPU is the CPU of every non-leader node, summed.
func (r *stepResult) workers() (cpu time.Duration, rss []int64) {
	for _, k := range r.roles() {
		if strings.HasPrefix(k, "worker") {
			cpu += r.usage[k].CPU
			rss = append(rss, r.usage[k].PeakRSS)
		}
	}
	return cpu, rss
}

type rampOpts struct {
	grace  time.Duration
	idle   time.Duration // how long to measure the idle cost before the load
	tick   time.Duration // the naive bot's -tick (0: naiveTick)
	profHz int           // perf's sampling frequency; 0: no perf
	// profDir gets the pprof profiles of "+" steps (the ramp's -out
	// BASE-prof); "": DIR/prof in the work dir.
	profDir string
	logf    func(string, ...any)
	// self is this program, run as the etcd, NATS and naive-bot
	// children. The ramp builds it with `go build` (a `go run` binary
	// has no symbol table, and perf could not name its functions).
	self string
	// topology is the etcd and NATS of every botctl step.
	topology topology
	// infranode is test/infracluster's member binary (r3); the ramp
	// builds it when unset.
	infranode string
	// subjects counts the NATS messages of every botctl step by kind
	// of subject (subjectCount); such a step's timings are not clean.
	subjects bool
	// natsSync is every NATS server's JetStream sync_interval: "always"
	// (botctl's default and production examples') or an interval.
	natsSync string
	// nodeArgs are extra flags for every botctl node (-node-args): an
	// experiment off the default configuration, named in the report.
	nodeArgs []string
}

// runStep starts a fresh deployment for st, drives it and measures it.
func runStep(bin, dir string, idx int, st step, o rampOpts) (*stepResult, error) {
	res := &stepResult{step: st, profiles: map[string]string{}}
	sdir := filepath.Join(dir, fmt.Sprintf("step%d", idx))
	var pids map[string]int
	var targets map[string]pprofTarget
	var sim *simClient
	var natsURL string
	var leaderAPI string
	// Run in reverse: the step's processes stop, then its data goes.
	cleanup := []func(){func() { os.RemoveAll(sdir) }}
	// perf writes its data here, also in a naive step (which has no
	// data dir of its own).
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		return res, err
	}
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()
	switch st.kind {
	case "naive":
		c, err := proc.Start(proc.Options{Bin: bin, Dir: sdir, Bots: []string{rampBot}, SimArgs: []string{"--record"},
			External: &proc.External{EtcdURLs: []string{"-"}, NATSURL: "-"}})
		cleanup = append(cleanup, c.Close)
		if err != nil {
			return res, err
		}
		p, err := proc.StartProc("naive bot", o.self, []string{"naive", "-wecom", c.SimWS, "-bot", rampBot, "-secret", "s-" + rampBot,
			"-answer", st.answer.String(), "-tick", o.tick.String(), "-pprof"}, proc.StartOptions{})
		if err != nil {
			return res, err
		}
		cleanup = append(cleanup, p.Kill)
		if _, err := p.WaitStdout("naive ready", time.Minute); err != nil {
			return res, err
		}
		pids = map[string]int{"naive bot": p.Pid(), "sim": c.Sim.Pid()}
		t, err := childPprof(p)
		if err != nil {
			return res, err
		}
		targets = map[string]pprofTarget{"naive bot": t}
		sim = newSimClient(c.SimHTTP)
	default:
		d, err := startDeployment(bin, sdir, o, st.nodes, st.answer)
		cleanup = append(cleanup, d.close)
		if err != nil {
			return res, err
		}
		res.leader = d.leader
		if n := d.c.Node(d.leader); n != nil {
			leaderAPI = n.API
		}
		pids = d.procs()
		if targets, err = d.pprofTargets(); err != nil {
			return res, err
		}
		sim = newSimClient(d.c.SimHTTP)
		natsURL = d.c.NATSURL
	}
	pids["load (this process)"] = os.Getpid()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var outs *outputLog
	if natsURL != "" {
		var stopWatch func()
		var err error
		outs, stopWatch, err = watchOutputs(ctx, natsURL)
		if err != nil {
			return res, fmt.Errorf("output watcher: %w", err)
		}
		cleanup = append(cleanup, stopWatch)
	}
	time.Sleep(2 * time.Second) // the pusher's first scan, every worker's first fetch
	// The idle cost: what the processes use with no traffic at all
	// (election, pulse, health, scans), so that what a message costs can
	// be told from what the deployment costs.
	if o.idle > 0 {
		idle := startSampler(pids)
		time.Sleep(o.idle)
		res.idle, res.idleWall = idle.stop()
	}
	if _, err := sim.drain(); err != nil {
		return res, err
	}

	var perf *perfSet
	if st.profile && o.profHz > 0 {
		perf = startPerf(pids, sdir, o.profHz, o.logf)
	}
	var counter *subjectCount
	if o.subjects && natsURL != "" {
		var err error
		if counter, err = countSubjects(natsURL); err != nil {
			return res, fmt.Errorf("subject counter: %w", err)
		}
	}
	var prof *pprofSet
	if st.profile {
		prof = startPprof(targets, o.profDir, sdir, fmt.Sprintf("step%d", idx), o.logf)
	}
	smp := startSampler(pids)
	prefix := fmt.Sprintf("s%d", idx)
	convs := map[string]*convo{}
	for i := range st.conversations {
		convs[fmt.Sprintf("%s-%d", prefix, i)] = &convo{expected: task.Hash(ai.DemoAnswer(question(prefix, i), 3, 0))}
	}
	genDone := make(chan struct{})
	go func() {
		res.gen = generate(sim, prefix, st.conversations, st.rate)
		close(genDone)
	}()
	def := config.Defaults().Derived() // the nodes run on this machine
	slots := def.Worker.LeaderSlots + (st.nodes-1)*def.Worker.Slots
	if st.kind == "naive" {
		slots = st.conversations
	}
	rounds := (st.conversations + slots - 1) / slots
	deadline := time.Now().Add(time.Duration(float64(st.conversations)/st.rate*float64(time.Second)) + time.Duration(rounds)*st.answer + o.grace)
	start := time.Now()
	done := 0
	full := map[string]int{}
	collect := func() error {
		ev, err := sim.drain()
		if err != nil {
			return err
		}
		for _, e := range ev {
			cv := convs[e.Chat]
			if cv == nil {
				continue
			}
			switch e.Kind {
			case wecomsim.RecordCallback:
				if e.Cmd == "aibot_msg_callback" {
					cv.msgid, cv.asked = e.MsgID, e.At
				}
			case wecomsim.RecordFrame:
				cv.frames = append(cv.frames, frame{at: e.At, hash: e.ContentHash, finish: e.Finish})
				if e.Finish && e.ContentHash == cv.expected {
					if full[e.Chat] == 0 {
						done++
					}
					full[e.Chat]++
				}
			}
		}
		return nil
	}
	lastLog := time.Now()
	generating := true
	for {
		time.Sleep(time.Second)
		if err := collect(); err != nil {
			res.err = err.Error()
			break
		}
		if generating {
			select {
			case <-genDone:
				generating = false
			default:
			}
		}
		if time.Since(lastLog) >= 10*time.Second {
			lastLog = time.Now()
			o.logf("step %d %s: t=%s answered %d/%d", idx, st.spec, time.Since(start).Round(time.Second), done, st.conversations)
		}
		if !generating && done >= st.conversations {
			break
		}
		if time.Now().After(deadline) {
			res.timedOut = true
			break
		}
	}
	res.usage, res.wall = smp.stop()
	res.ticks = smp.timeline()
	if prof != nil {
		prof.endWindow()
	}
	if counter != nil {
		res.subjects, res.ops = counter.stop()
		if outs != nil {
			outs.mu.Lock()
			res.harnessWatch = maps.Clone(outs.seen)
			outs.mu.Unlock()
		}
	}
	if leaderAPI != "" {
		if ev, err := scrapeCounters(leaderAPI, "botctl_pusher_events_total"); err == nil {
			o.logf("step %d: leader's pusher: %s", idx, ev)
		}
		if in, err := scrapeCounters(leaderAPI, "botctl_inbound_total"); err == nil {
			o.logf("step %d: leader's inbound: %s", idx, in)
			res.leaderInbound = in
		}
		hs, err := scrapeHistograms(leaderAPI, "botctl_receipt_latency_seconds", "botctl_inbound_stage_seconds")
		if err != nil {
			res.leaderErr = err.Error()
		} else {
			res.leaderReceipt = hs["botctl_receipt_latency_seconds"]
			res.leaderStages = map[string]histogram{}
			for k, h := range hs {
				if st, ok := strings.CutPrefix(k, "botctl_inbound_stage_seconds/"); ok {
					res.leaderStages[st] = h
				}
			}
		}
	}
	if perf != nil {
		res.profiles = perf.stop()
	}
	if prof != nil {
		res.pprof = prof.finish()
	}
	<-genDone                   // it ends by itself, after its n posts
	time.Sleep(2 * time.Second) // a duplicate would show up here
	if err := collect(); err != nil && res.err == "" {
		res.err = err.Error()
	}
	if s, err := sim.stats(); err == nil {
		res.quota, res.expired, res.invalid = s.QuotaRejections, s.ExpiredUpdates, s.InvalidReqID
	}
	var recs map[string]*task.Record
	if natsURL != "" {
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var err error
		if recs, err = readRecords(rctx, natsURL); err != nil {
			o.logf("step %d: task records not read (no split of the final lag): %v", idx, err)
		}
		rcancel()
	}
	analyseStep(res, convs, outs, recs)
	return res, nil
}

// analyseStep turns what the simulator recorded (and the output versions
// the watcher saw) into the step's figures.
func analyseStep(r *stepResult, convs map[string]*convo, outs *outputLog, recs map[string]*task.Record) {
	var vers map[string][]version
	if outs != nil {
		outs.mu.Lock()
		defer outs.mu.Unlock()
		vers, r.versions = outs.vers, outs.n
	}
	type edge struct {
		at time.Time
		d  int
	}
	var live, answering []edge
	var first, last time.Time
	for _, cv := range convs {
		if cv.asked.IsZero() {
			r.lost++
			continue
		}
		if first.IsZero() || cv.asked.Before(first) {
			first = cv.asked
		}
		sort.Slice(cv.frames, func(i, j int) bool { return cv.frames[i].at.Before(cv.frames[j].at) })
		if len(cv.frames) == 0 {
			r.receiptMissing++
		} else {
			r.receipt = append(r.receipt, cv.frames[0].at.Sub(cv.asked))
			r.receiptAt = append(r.receiptAt, timed{cv.asked, cv.frames[0].at.Sub(cv.asked)})
		}
		var fin time.Time
		nfull := 0
		taskID := task.ID(rampBot, cv.msgid)
		for k, f := range cv.frames {
			r.framesTotal++
			if f.finish && f.hash == cv.expected {
				nfull++
				if fin.IsZero() {
					fin = f.at
				}
			}
			if vers == nil || k == 0 { // the first frame is the receipt
				continue
			}
			var match *version
			for i := range vers[taskID] {
				if v := &vers[taskID][i]; v.hash == f.hash {
					match = v
					break
				}
			}
			switch {
			case match == nil:
				r.heartbeats++
			case f.finish && f.hash == cv.expected:
				r.finalLag = append(r.finalLag, f.at.Sub(match.at))
				if rec := recs[taskID]; rec != nil {
					if done := transitionAt(rec, "exec", string(task.Succeeded)); !done.IsZero() {
						r.finalWorker = append(r.finalWorker, done.Sub(match.at))
						r.finalPusher = append(r.finalPusher, f.at.Sub(done))
					}
				}
			default:
				r.progressLag = append(r.progressLag, f.at.Sub(match.at))
			}
		}
		for i := range cv.frames {
			j := i
			for j < len(cv.frames) && cv.frames[j].at.Sub(cv.frames[i].at) < time.Minute {
				j++
			}
			r.maxPer60 = max(r.maxPer60, j-i)
		}
		live = append(live, edge{cv.asked, +1})
		switch {
		case nfull == 0:
			r.lost++
			continue
		case nfull > 1:
			r.dup++
		}
		r.answered++
		r.completion = append(r.completion, fin.Sub(cv.asked))
		live = append(live, edge{fin, -1})
		if vs := vers[taskID]; len(vs) > 0 {
			// Answering: from its first output write (about a second after
			// a worker started it) to its complete answer shown.
			answering = append(answering, edge{vs[0].at, +1}, edge{fin, -1})
			r.answerAt = append(r.answerAt, span{vs[0].at, fin})
		}
		if fin.After(last) {
			last = fin
		}
	}
	peak := func(es []edge) int {
		sort.Slice(es, func(i, j int) bool { return es[i].at.Before(es[j].at) })
		n, top := 0, 0
		for _, e := range es {
			n += e.d
			top = max(top, n)
		}
		return top
	}
	r.peakLive, r.peakAnswering = peak(live), peak(answering)
	if r.answered > 0 && last.After(first) {
		r.throughput = float64(r.answered) / last.Sub(first).Seconds()
	}
	r.receipt, r.progressLag, r.finalLag, r.completion = r.receipt.sorted(), r.progressLag.sorted(), r.finalLag.sorted(), r.completion.sorted()
	r.finalWorker, r.finalPusher = r.finalWorker.sorted(), r.finalPusher.sorted()
}

// stepLabel names a step in tables and plots.
func (r *stepResult) label() string {
	switch {
	case r.kind == "naive":
		return "naive bot"
	case r.nodes != 3:
		return fmt.Sprintf("botctl, %d node", r.nodes)
	}
	return "botctl, 3 nodes"
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
