package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// version is one write of a task's output, as the watcher saw it.
type version struct {
	hash string
	at   time.Time // Output.Updated: the worker's write time
}

// outputLog watches the progress and output buckets (its own NATS
// connection) and keeps every version's hash and write time per task.
type outputLog struct {
	mu   sync.Mutex
	vers map[string][]version
	n    int
	seen map[string]int // every entry each watch delivered, by -subjects' name of the delivery (subtracted there)
}

// watchedBuckets: a running attempt writes its text to the progress
// bucket, its last write to the output bucket.
var watchedBuckets = []string{"BOTCTL_PROGRESS", "BOTCTL_OUTPUT"}

func watchOutputs(ctx context.Context, url string) (*outputLog, func(), error) {
	nc, err := nats.Connect(url, nats.Name("load output watcher"))
	if err != nil {
		return nil, nil, err
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	l := &outputLog{vers: map[string][]version{}, seen: map[string]int{}}
	var watchers []natsjs.KeyWatcher
	var wg sync.WaitGroup
	stop := func() {
		for _, w := range watchers {
			w.Stop()
		}
		wg.Wait()
		nc.Close()
	}
	for _, bucket := range watchedBuckets {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("bucket %s: %w", bucket, err)
		}
		w, err := kv.WatchAll(ctx, natsjs.UpdatesOnly())
		if err != nil {
			stop()
			return nil, nil, err
		}
		watchers = append(watchers, w)
		kind := "delivery KV_" + bucket + " (watch)"
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range w.Updates() {
				if e != nil {
					l.mu.Lock()
					l.seen[kind]++
					l.mu.Unlock()
				}
				if e == nil || e.Operation() != natsjs.KeyValuePut {
					continue
				}
				o, err := task.DecodeOutput(e.Value())
				if err != nil {
					continue
				}
				l.mu.Lock()
				l.vers[o.TaskID] = append(l.vers[o.TaskID], version{hash: task.Hash(o.Text), at: o.Updated})
				l.n++
				l.mu.Unlock()
			}
		}()
	}
	return l, stop, nil
}

func hash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}

type pushResult struct {
	conv, workers, slots int
	answer, ramp         time.Duration
	wall                 time.Duration // first post → last final (or timeout)
	progressLag          dist          // matched progress frames: output write → frame accepted
	finalLag             dist          // done output write → final frame accepted
	receipts             int
	frames               int // accepted frames, all kinds
	heartbeats           int // frames matching no output version (receipt excluded)
	pushes               int // aibot_send_msg accepted
	framesPerConv        dist
	maxPerMin            int // most frames any conversation got in a 60 s window
	lost, dup            int
	quota, expired       int64
	invalidReq           int64
	leaderCPU            time.Duration
	leaderHWM            int64
	workerCPU            time.Duration
	workerRSS            []int64
	pusherStats          pusher.Stats
	versions             int
	timedOut             bool
}

func pushRun(conv, workers int, answer time.Duration, rate float64, profile string) (pushResult, error) {
	r := pushResult{conv: conv, workers: workers, answer: answer}
	c, err := newCluster()
	if err != nil {
		return r, err
	}
	defer c.close()
	leader, err := c.startNode(nodeParams{ID: "leader", Slots: 1, LeaderSlots: 1, AnswerTime: answer})
	if err != nil {
		return r, err
	}
	if err := c.waitLeader(); err != nil {
		return r, err
	}
	r.slots = 1
	per := conv/workers + 16
	var children []*node
	for i := range workers {
		n, err := c.startChild(nodeParams{ID: fmt.Sprintf("w%d", i+1), Slots: per, AnswerTime: answer})
		if err != nil {
			return r, err
		}
		children = append(children, n)
		r.slots += per
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	outs, stopWatch, err := watchOutputs(ctx, c.nats.ClientURL())
	if err != nil {
		return r, err
	}
	time.Sleep(2 * time.Second)
	c.sim.DrainRecorded(bot)

	if profile != "" {
		f, err := os.Create(profile)
		if err == nil {
			pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	resetHWM()
	cpu0 := cpuTime()
	start := time.Now()
	prefix := fmt.Sprintf("p%d", conv)
	ev := []wecomsim.RecordedEvent{}
	var evMu sync.Mutex
	genDone := make(chan struct{})
	go func() {
		var late time.Duration
		_, late = openLoop(c.sim, prefix, rate, time.Duration(float64(conv)/rate*float64(time.Second)))
		r.ramp = time.Since(start)
		logf("push %d: all posted in %s (generator max lateness %s)", conv, secs(r.ramp), ms(late))
		close(genDone)
	}()
	finals := map[string]bool{}
	deadline := start.Add(time.Duration(float64(conv)/rate*float64(time.Second)) + answer + 2*time.Minute)
	lastLog := time.Now()
	for {
		time.Sleep(500 * time.Millisecond)
		got := c.sim.DrainRecorded(bot)
		evMu.Lock()
		ev = append(ev, got...)
		evMu.Unlock()
		for _, e := range got {
			if e.Kind == wecomsim.RecordFrame && e.Finish && e.Chat != "" {
				if e.Cmd == "aibot_send_msg" || e.ReplyTo != "" {
					finals[e.Chat] = true
				}
			}
		}
		if time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			ps := leader.srv.Pusher(bot)
			var st pusher.Stats
			if ps != nil {
				st = ps.Stats()
			}
			logf("push %d: t=%s finals %d, pusher %+v, RSS %s", conv, time.Since(start).Round(time.Second), len(finals), st, mb(procStatusKB("VmRSS")))
		}
		select {
		case <-genDone:
			if len(finals) >= conv {
				goto finished
			}
		default:
		}
		if time.Now().After(deadline) {
			r.timedOut = true
			goto finished
		}
	}
finished:
	time.Sleep(2 * time.Second) // a duplicate would show up here
	ev = append(ev, c.sim.DrainRecorded(bot)...)
	r.wall = time.Since(start)
	r.leaderCPU = cpuTime() - cpu0
	r.leaderHWM = procStatusKB("VmHWM")
	if ps := leader.srv.Pusher(bot); ps != nil {
		r.pusherStats = ps.Stats()
	}
	st, _ := c.sim.Stats(bot)
	r.quota, r.expired, r.invalidReq = st.QuotaRejections, st.ExpiredUpdates, st.InvalidReqIDs
	stopWatch()
	for _, n := range children {
		n.stop()
		cpu, rss := n.childUsage()
		r.workerCPU += cpu
		r.workerRSS = append(r.workerRSS, rss)
	}
	analyse(&r, ev, outs, prefix)
	return r, nil
}

func analyse(r *pushResult, ev []wecomsim.RecordedEvent, outs *outputLog, prefix string) {
	outs.mu.Lock()
	defer outs.mu.Unlock()
	r.versions = outs.n
	// Conversations: chat → its task and the expected answer.
	type convo struct {
		taskID, expected string
		times            []time.Time
		full             int // frames carrying the complete expected answer (final)
	}
	convs := map[string]*convo{}
	for _, e := range ev {
		if e.Kind == wecomsim.RecordCallback && e.Cmd == "aibot_msg_callback" && strings.HasPrefix(e.Chat, prefix+"-") {
			var i int
			fmt.Sscanf(strings.TrimPrefix(e.Chat, prefix+"-"), "%d", &i)
			q := fmt.Sprintf("question %d from %s", i, prefix)
			convs[e.Chat] = &convo{taskID: task.ID(bot, e.MsgID), expected: hash(ai.DemoAnswer(q, 3, 0))}
		}
	}
	receipt := hash("已收到，正在处理…")
	for _, e := range ev {
		if e.Kind != wecomsim.RecordFrame {
			continue
		}
		cv := convs[e.Chat]
		if cv == nil {
			continue
		}
		r.frames++
		cv.times = append(cv.times, e.At)
		if e.Cmd == "aibot_send_msg" {
			r.pushes++
		}
		if e.ContentHash == receipt {
			r.receipts++
			continue
		}
		if e.Finish && e.ContentHash == cv.expected {
			cv.full++
		}
		var match *version
		for i := range outs.vers[cv.taskID] {
			if v := &outs.vers[cv.taskID][i]; v.hash == e.ContentHash {
				match = v
				break
			}
		}
		switch {
		case match == nil:
			r.heartbeats++
		case e.Finish && match.hash == cv.expected: // the complete answer's write
			r.finalLag = append(r.finalLag, e.At.Sub(match.at))
		default:
			r.progressLag = append(r.progressLag, e.At.Sub(match.at))
		}
	}
	for _, cv := range convs {
		switch {
		case cv.full == 0:
			r.lost++
		case cv.full > 1:
			r.dup++
		}
		r.framesPerConv = append(r.framesPerConv, time.Duration(len(cv.times)))
		sort.Slice(cv.times, func(i, j int) bool { return cv.times[i].Before(cv.times[j]) })
		for i := range cv.times {
			j := i
			for j < len(cv.times) && cv.times[j].Sub(cv.times[i]) < time.Minute {
				j++
			}
			r.maxPerMin = max(r.maxPerMin, j-i)
		}
	}
	if len(convs) != r.conv {
		r.lost += r.conv - len(convs) // callbacks never written
	}
	r.progressLag, r.finalLag, r.framesPerConv = r.progressLag.sorted(), r.finalLag.sorted(), r.framesPerConv.sorted()
}

func pushMain(args []string) error {
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	out := fs.String("out", "", "write the Markdown report here (default stdout)")
	convFlag := fs.String("conversations", "1000,5000", "concurrent conversations of each run")
	answer := fs.Duration("answer", 60*time.Second, "demo answer time")
	workers := fs.Int("workers", 2, "worker nodes (child processes) besides the leader")
	rate := fs.Float64("rate", 200, "messages per second while the conversations start (open loop)")
	profile := fs.String("cpuprofile", "", "write the leader process's CPU profile of the last run here")
	fs.Parse(args)
	command := strings.TrimSpace("go run ./test/load push " + shellJoin(args))

	var res []pushResult
	for _, f := range strings.Split(*convFlag, ",") {
		var n int
		if _, err := fmt.Sscan(f, &n); err != nil || n <= 0 {
			continue
		}
		r, err := pushRun(n, *workers, *answer, *rate, *profile)
		if err != nil {
			return err
		}
		logf("push %d: lag p50 %s p99 %s, final p99 %s, lost %d dup %d quota %d, leader CPU %s RSS %s",
			n, ms(r.progressLag.pct(.5)), ms(r.progressLag.pct(.99)), ms(r.finalLag.pct(.99)), r.lost, r.dup, r.quota, secs(r.leaderCPU), mb(r.leaderHWM))
		res = append(res, r)
	}
	var b strings.Builder
	b.WriteString(header("Push lag and scale", command))
	fmt.Fprintf(&b, `Setup: the **leader process** (this one) holds embedded etcd, embedded NATS (JetStream), the WeCom
simulator (recorder on), the load generator, an output-bucket watcher, and the leader node (serve.Run,
1 worker slot). %d worker nodes run as child processes (serve.Run, slots = conversations/%d + 16), on the
same etcd and NATS; only the leader holds the WeCom connection. Each conversation asks one question
(open-loop generator at %.0f/s until all are started); the demo backend streams every answer for %s
(a piece every 50 ms; workers write the output bucket at most once a second per task). Defaults
otherwise: push budget 20/min, stream window 6 m, heartbeat 20 s.

Measured with the simulator's recorder and clock, and a watcher on the output bucket:
- **push lag** = output version written by the worker (`+"`Output.Updated`"+`) → the frame carrying exactly
  that content (matched by content hash) accepted by the simulator. Progress frames and final frames
  separately. Versions superseded before the pusher's next frame are never shown, by design (pacing).
- frames per conversation (receipt + progress + heartbeats + final) against the budget of 20/min;
  quota violations = the simulator's `+"`quota_rejections`"+` (45009).
- lost = a conversation whose complete expected answer (`+"`ai.DemoAnswer`"+`) never arrived in a finished
  frame or push; duplicated = it arrived more than once.
- leader CPU = this process's CPU time (getrusage) from the first message to the last final frame: it
  **includes etcd, NATS, the simulator, the generator and the watcher**, not just the leader node.
  Peak RSS = VmHWM of this process (reset at the start of each run), same caveat.

| conversations | all started in | all answered in | progress lag p50 | p99 | max | final lag p50 | p99 | max | frames/conv mean (max) | most frames in 60 s | heartbeat frames | pushes | quota violations | lost | duplicated | leader-process CPU (cores) | peak RSS | worker CPU (cores) | worker peak RSS |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
`, *workers, *workers, *rate, *answer)
	for _, r := range res {
		var sum time.Duration
		for _, f := range r.framesPerConv {
			sum += f
		}
		mean := float64(sum) / float64(max(len(r.framesPerConv), 1))
		wallS := r.wall.Seconds()
		var wr []string
		for _, k := range r.workerRSS {
			wr = append(wr, mb(k))
		}
		timed := ""
		if r.timedOut {
			timed = " (timed out)"
		}
		fmt.Fprintf(&b, "| %d | %s | %s%s | %s | %s | %s | %s | %s | %s | %.1f (%d) | %d | %d | %d | %d | %d | %d | %s (%.2f) | %s | %s (%.2f) | %s |\n",
			r.conv, secs(r.ramp), secs(r.wall), timed,
			ms(r.progressLag.pct(.5)), ms(r.progressLag.pct(.99)), ms(r.progressLag.max()),
			ms(r.finalLag.pct(.5)), ms(r.finalLag.pct(.99)), ms(r.finalLag.max()),
			mean, int64(r.framesPerConv.max()), r.maxPerMin, r.heartbeats, r.pushes, r.quota, r.lost, r.dup,
			secs(r.leaderCPU), r.leaderCPU.Seconds()/wallS, mb(r.leaderHWM), secs(r.workerCPU), r.workerCPU.Seconds()/wallS, strings.Join(wr, ", "))
	}
	b.WriteString("\nPusher counters at the end of each run (the leader's `/status`):\n\n| conversations | frames | pushes | delivered | truncated | throttled | errors | failed | output versions seen | expired updates | invalid req_ids |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range res {
		s := r.pusherStats
		fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n", r.conv, s.Frames, s.Pushes, s.Delivered, s.Truncated, s.Throttled, s.Errors, s.Failed, r.versions, r.expired, r.invalidReq)
	}
	b.WriteString("\nTargets: 5,000 conversations, push lag p99 ≤ 3 s, 0 quota violations, 0 lost, 0 duplicated, RSS < 512 MB.\n")
	for _, r := range res {
		lagP99 := max(r.progressLag.pct(.99), r.finalLag.pct(.99))
		check := func(ok bool) string {
			if ok {
				return "met"
			}
			return "**missed**"
		}
		fmt.Fprintf(&b, "- %d conversations: lag p99 %s (%s), quota %d (%s), lost %d (%s), duplicated %d (%s), RSS %s (%s).\n",
			r.conv, ms(lagP99), check(lagP99 <= 3*time.Second), r.quota, check(r.quota == 0), r.lost, check(r.lost == 0),
			r.dup, check(r.dup == 0), mb(r.leaderHWM), check(r.leaderHWM < 512*1024))
	}
	if *out == "" {
		fmt.Print(b.String())
		return nil
	}
	return os.WriteFile(*out, []byte(b.String()), 0o644)
}

// readRecords reads every task record of the bucket as it is now (a
// watcher's initial values: one consumer, not a read per key), after a
// step: the times a record's transitions carry split the final frame's
// lag into the worker's part and the pusher's.
func readRecords(ctx context.Context, url string) (map[string]*task.Record, error) {
	nc, err := nats.Connect(url, nats.Name("load record reader"))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, "BOTCTL_TASKS")
	if err != nil {
		return nil, err
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	out := map[string]*task.Record{}
	for e := range w.Updates() {
		if e == nil {
			break // the initial values are all in
		}
		var r task.Record
		if e.Operation() == natsjs.KeyValuePut && json.Unmarshal(e.Value(), &r) == nil {
			out[r.ID] = &r
		}
	}
	return out, ctx.Err()
}

// transitionAt is when r first moved dim to to (zero: never).
func transitionAt(r *task.Record, dim, to string) time.Time {
	for _, t := range r.Transitions {
		if t.Dim == dim && t.To == to {
			return t.At
		}
	}
	return time.Time{}
}
