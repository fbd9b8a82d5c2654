package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// completionRow is one run of the completion benchmark.
type completionRow struct {
	label                string
	slots, leaderSlots   int
	conv                 int
	rate                 float64
	answer               time.Duration
	ramp, wall           time.Duration
	answered, lost, dup  int
	completion           dist // callback written → final frame with the whole answer accepted
	timedOut             bool
	leaderCPU, workerCPU time.Duration
	leaderHWM            int64
	workerRSS            []int64
}

// completionRun: three nodes (the leader in this process, two children),
// conv conversations opened at rate, one question each; per task the time
// from the user's message (the callback written to the leader's
// WebSocket, simulator clock) to the final frame carrying the complete
// answer accepted by the simulator.
func completionRun(label string, slots, leaderSlots, conv int, rate float64, answer, timeout time.Duration) (completionRow, error) {
	row := completionRow{label: label, slots: slots, leaderSlots: leaderSlots, conv: conv, rate: rate, answer: answer}
	c, err := newCluster()
	if err != nil {
		return row, err
	}
	defer c.close()
	p := nodeParams{ID: "n1", Slots: slots, LeaderSlots: leaderSlots, AnswerTime: answer}
	if _, err := c.startNode(p); err != nil {
		return row, err
	}
	if err := c.waitLeader(); err != nil {
		return row, err
	}
	var children []*node
	for i := 2; i <= 3; i++ {
		p.ID = fmt.Sprintf("n%d", i)
		n, err := c.startChild(p)
		if err != nil {
			return row, err
		}
		children = append(children, n)
	}
	time.Sleep(2 * time.Second) // the pusher's rebuild, every worker's first fetch
	c.sim.DrainRecorded(bot)

	prefix := fmt.Sprintf("c%d", conv)
	expected := map[string]string{} // chat → hash of its complete answer
	for i := range conv {
		expected[fmt.Sprintf("%s-%d", prefix, i)] = hash(ai.DemoAnswer(fmt.Sprintf("question %d from %s", i, prefix), 3, 0))
	}
	resetHWM()
	cpu0 := cpuTime()
	start := time.Now()
	genDone := make(chan struct{})
	go func() {
		_, late := openLoop(c.sim, prefix, rate, time.Duration(float64(conv)/rate*float64(time.Second)))
		row.ramp = time.Since(start)
		logf("completion %s: all %d posted in %s (generator max lateness %s)", label, conv, secs(row.ramp), ms(late))
		close(genDone)
	}()
	asked := map[string]time.Time{}
	done := map[string]time.Time{}
	full := map[string]int{}
	deadline := start.Add(time.Duration(float64(conv)/rate*float64(time.Second)) + answer + timeout)
	lastLog := time.Now()
	collect := func() {
		for _, e := range c.sim.DrainRecorded(bot) {
			want, ok := expected[e.Chat]
			if !ok {
				continue
			}
			switch {
			case e.Kind == wecomsim.RecordCallback && e.Cmd == "aibot_msg_callback":
				asked[e.Chat] = e.At
			case e.Kind == wecomsim.RecordFrame && e.Finish && e.ContentHash == want:
				full[e.Chat]++
				if t, ok := done[e.Chat]; !ok || e.At.Before(t) {
					done[e.Chat] = e.At
				}
			}
		}
	}
	for {
		time.Sleep(500 * time.Millisecond)
		collect()
		if time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			logf("completion %s: t=%s asked %d answered %d", label, time.Since(start).Round(time.Second), len(asked), len(done))
		}
		select {
		case <-genDone:
			if len(done) >= conv {
				goto finished
			}
		default:
		}
		if time.Now().After(deadline) {
			row.timedOut = true
			goto finished
		}
	}
finished:
	time.Sleep(2 * time.Second) // a duplicate would show up here
	collect()
	row.wall = time.Since(start)
	row.leaderCPU = cpuTime() - cpu0
	row.leaderHWM = procStatusKB("VmHWM")
	for _, n := range children {
		n.stop()
		cpu, rss := n.childUsage()
		row.workerCPU += cpu
		row.workerRSS = append(row.workerRSS, rss)
	}
	for chat := range expected {
		a, okA := asked[chat]
		d, okD := done[chat]
		if !okA || !okD {
			row.lost++
			continue
		}
		row.answered++
		row.completion = append(row.completion, d.Sub(a))
		if full[chat] > 1 {
			row.dup++
		}
	}
	row.completion = row.completion.sorted()
	logf("completion %s: answered %d/%d, p50 %s p99 %s max %s", label, row.answered, conv,
		secs(row.completion.pct(.5)), secs(row.completion.pct(.99)), secs(row.completion.max()))
	return row, nil
}

func completionMain(args []string) error {
	fs := flag.NewFlagSet("completion", flag.ExitOnError)
	out := fs.String("out", "", "write the Markdown report here (default stdout)")
	conv := fs.Int("conversations", 1000, "conversations, one question each")
	rate := fs.Float64("rate", 200, "new messages per second (open loop)")
	answer := fs.Duration("answer", 10*time.Second, "demo answer time (ai.demo.answer_time)")
	before := fs.Bool("before", true, "also run the old defaults (worker.slots 8, leader_slots 4) for comparison")
	timeout := fs.Duration("timeout", 15*time.Minute, "give up on a run this long after the last answer was due")
	fs.Parse(args)
	command := strings.TrimSpace("go run ./test/load completion " + shellJoin(args))

	def := config.Defaults().Worker
	runs := []struct {
		label       string
		slots, lead int
	}{{"defaults", def.Slots, def.LeaderSlots}}
	if *before {
		runs = append(runs, struct {
			label       string
			slots, lead int
		}{"before (old defaults)", 8, 4})
	}
	var rows []completionRow
	for _, r := range runs {
		row, err := completionRun(r.label, r.slots, r.lead, *conv, *rate, *answer, *timeout)
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}

	var b strings.Builder
	b.WriteString(header("Completion time under load, default configuration", command))
	fmt.Fprintf(&b, `Setup: three botctl nodes (`+"`serve.Run`"+`) on one machine: n1 in this process (it leads the bot and
holds the WeCom connection), n2 and n3 child processes, on one embedded etcd and one embedded NATS
(JetStream) in this process, with the WeCom simulator (recorder on). Default configuration except the
demo AI backend's answer time (`+"`ai.demo.answer_time`"+` = %s): every node runs `+"`worker.slots`"+`, and
the leader `+"`worker.leader_slots`"+` while it leads; `+"`ai.max_concurrency`"+` 0. The generator opens %d
conversations at %.0f new messages/s (open loop), one question each.

**Completion** = the user's message (the callback written to the leader's WebSocket) → the final frame
carrying the complete expected answer (`+"`ai.DemoAnswer`"+`, matched by content hash) accepted by the
simulator, both on the simulator's clock. **Over answer** = completion − the answer time: what the
system adds (queueing for a slot, dispatch, output coalescing, pacing, delivery).

| run | slots (leader + 2 workers) | answered | lost | duplicated | all started in | all answered in | completion p50 | p90 | p99 | max | over answer p50 | p90 | p99 | max | leader-process CPU (cores) | peak RSS | worker CPU (cores) | worker peak RSS |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
`, *answer, *conv, *rate)
	for _, r := range rows {
		over := func(p float64) time.Duration { return r.completion.pct(p) - r.answer }
		var wr []string
		for _, k := range r.workerRSS {
			wr = append(wr, mb(k))
		}
		timed := ""
		if r.timedOut {
			timed = " (timed out)"
		}
		wallS := r.wall.Seconds()
		fmt.Fprintf(&b, "| %s | %d + 2×%d = %d | %d/%d | %d | %d | %s | %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %s (%.2f) | %s | %s (%.2f) | %s |\n",
			r.label, r.leaderSlots, r.slots, r.leaderSlots+2*r.slots, r.answered, r.conv, r.lost, r.dup, secs(r.ramp), secs(r.wall), timed,
			secs(r.completion.pct(.5)), secs(r.completion.pct(.9)), secs(r.completion.pct(.99)), secs(r.completion.max()),
			secs(over(.5)), secs(over(.9)), secs(over(.99)), secs(r.completion.max()-r.answer),
			secs(r.leaderCPU), r.leaderCPU.Seconds()/wallS, mb(r.leaderHWM), secs(r.workerCPU), r.workerCPU.Seconds()/wallS, strings.Join(wr, ", "))
	}
	b.WriteString("\nLeader-process CPU and peak RSS include etcd, NATS, the simulator and the generator (getrusage, VmHWM\nreset at the start of each run); worker figures are the two child processes'.\n\n")
	b.WriteString("Target (issue 8): default configuration, completion p99 within 2 s of the answer time.\n")
	for _, r := range rows {
		over := r.completion.pct(.99) - r.answer
		verdict := "met"
		if over > 2*time.Second || r.lost > 0 {
			verdict = fmt.Sprintf("**missed** by %s", secs(over-2*time.Second))
			if r.lost > 0 {
				verdict += fmt.Sprintf(", %d not answered", r.lost)
			}
		}
		fmt.Fprintf(&b, "- %s: p99 %s over the answer time: %s.\n", r.label, secs(over), verdict)
	}
	if *out == "" {
		fmt.Print(b.String())
		return nil
	}
	return os.WriteFile(*out, []byte(b.String()), 0o644)
}
