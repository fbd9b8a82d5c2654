package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// rampReport is the Markdown report of a ramp whose botctl steps ran on
// topo.
func rampReport(command string, topo topology, natsSync string, nodeArgs []string, rs []*stepResult) string {
	var b strings.Builder
	title := "Load ramp: three real nodes, default configuration"
	if topo == topologyR3 {
		title = "Load ramp: three real nodes on the production topology (3 etcd, 3 NATS, JetStream R3)"
	}
	b.WriteString(header(title, command))
	fmt.Fprintf(&b, "- topology: %s\n", topo.describe())
	fmt.Fprintf(&b, "- JetStream sync_interval of every NATS server: %s\n", natsSync)
	if len(nodeArgs) > 0 {
		fmt.Fprintf(&b, "- **not the default configuration**: every botctl node also ran with `%s`\n", strings.Join(nodeArgs, " "))
	}
	if l, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(&b, "- load average at the end (1, 5, 15 min): %s\n", strings.Join(strings.Fields(string(l))[:3], ", "))
	}
	b.WriteString("\n")
	def := config.Defaults().Derived() // worker.slots as the nodes on this machine derive it
	state := `one etcd
(single member) and one NATS server with JetStream (children of the load binary, started by
` + "`pkg/infra`" + ` exactly as ` + "`botctl infra`" + ` starts them, but apart so that their CPU and memory are told
apart)`
	except := ""
	if topo == topologyR3 {
		state = fmt.Sprintf(`%d etcd
members (one cluster, fsync on, as in production) and %d NATS servers clustered with JetStream
(`+"`test/infracluster`"+`'s infranode processes, the topology production uses; every node is given
every member's URL)`, topo.members(), topo.members())
		except = fmt.Sprintf(", and `--nats-replicas %d`", topo.replicas())
	}
	fmt.Fprintf(&b, `Topology, every part a process of its own on this machine, a fresh one per step: %s, `+"`botctl sim --record`"+` (the WeCom simulator, every limit enforced: stream window %s,
%d frames per conversation per minute), and N `+"`botctl serve`"+` nodes (3 unless the step says 1).
The nodes run the **default configuration** except what points them at etcd, NATS and the
simulator, and the demo AI backend's answer time (`+"`--ai demo --demo-answer-time`"+`)%s: election TTL %s,
`+"`nats.replicas`"+` %d, `+"`worker.slots`"+` %d (`+"`worker.leader_slots`"+` %d while leading), push budget %d/min,
heartbeat %s. One node wins the election and holds the bot's WeCom connection (the leader); every
node, leader included, computes.

`, state, def.Push.StreamWindow, wecomsim.DefaultRateLimit, except, def.Election.TTL, topo.replicas(), def.Worker.Slots, def.Worker.LeaderSlots, def.Push.Budget, def.Push.Heartbeat)
	b.WriteString(`Load: each step opens CONVERSATIONS conversations at RATE new messages per second (open loop: a
scheduler hands each message to a pool of posters when it is due; lateness is recorded), one
question each, over the simulator's control API. Measured from outside the nodes only:
- **receipt** = the callback written to the leader's WebSocket → the first frame replying to it
  accepted by the simulator (simulator clock, its recorder);
- **push lag** = an output version written by a worker (` + "`Output.Updated`" + `, seen by a watcher on the
  output bucket) → the frame carrying exactly that content accepted by the simulator (content hash);
  progress frames and final frames apart. Versions superseded before the pusher's next frame are
  never shown, by design (pacing);
- **completion** = the callback → the final frame with the complete expected answer (` + "`ai.DemoAnswer`" + `)
  accepted; **over answer** = completion − the answer time;
- **quota violations** = the simulator's ` + "`quota_rejections`" + ` (45009); expired = frames after the window;
- **peak live** = the most conversations asked and not yet completely answered at one moment;
  **answering** = of those, the most with an answer being written (from a task's first output write
  to its complete answer shown): the rest wait in the queue for a worker slot;
- **CPU** = utime+stime from ` + "`/proc/<pid>/stat`" + ` over the step's window (first message → every answer
  in, or the step's deadline), per process; **RSS** = the highest ` + "`VmRSS`" + ` sampled once a second;
- **CPU per message** = a process's CPU over the window / the step's messages (each message is one
  whole answer: receipt, task, 30–120 output writes, about 18 frames a minute, delivery).
`)
	if topo.members() > 1 {
		fmt.Fprintf(&b, "- **etcd** and **NATS** = the sum over their %d members (CPU, idle cost, per message, RSS), with the largest member's RSS in brackets; profiles are of one member each.\n", topo.members())
	}
	b.WriteString("\n")

	b.WriteString("## Latency and correctness per step\n\n")
	b.WriteString("| # | system | conversations | new msg/s | answer | peak live (answering) | answered | lost | dup | receipt p50 | p99 | max | generator late p99 | push lag p50 | p99 | max | final lag p99 | completion over answer p50 | p99 | max | quota violations | expired | most frames in 60 s | heartbeat frames | answers/s |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i, r := range rs {
		lag := func(d dist, p float64) string {
			if r.kind == "naive" {
				return "n/a"
			}
			if p < 0 {
				return ms(d.max())
			}
			return ms(d.pct(p))
		}
		over := func(d time.Duration) string { return secs(d - r.answer) }
		t := ""
		if r.timedOut {
			t = " (timed out)"
		}
		fmt.Fprintf(&b, "| %d | %s | %d | %.0f | %s | %d (%s) | %d/%d%s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d | %d | %d | %.1f |\n",
			i+1, r.label(), r.conversations, r.rate, r.answer, r.peakLive, answering(r), r.answered, r.conversations, t, r.lost, r.dup,
			ms(r.receipt.pct(.5)), ms(r.receipt.pct(.99)), ms(r.receipt.max()), ms(r.gen.late.pct(.99)),
			lag(r.progressLag, .5), lag(r.progressLag, .99), lag(r.progressLag, -1), lag(r.finalLag, .99),
			over(r.completion.pct(.5)), over(r.completion.pct(.99)), over(r.completion.max()),
			r.quota, r.expired, r.maxPer60, r.heartbeats, r.throughput)
	}

	b.WriteString("\n## CPU and memory per step\n\nCores = CPU time / the step's window, with the idle cost in brackets (the same process measured with no traffic just before the step). ms/msg = CPU per message (one conversation answered end to end), with the marginal cost in brackets (CPU beyond the idle cost over the window, per message). Machine: other CPU = busy CPU time of the whole machine (/proc/stat) not spent in a measured process (other benchmarks on this shared box, perf, builds) over the window.\n\n")
	etcdH, natsH, stateRSS := "etcd cores (idle)", "NATS cores (idle)", "RSS"
	if n := topo.members(); n > 1 {
		etcdH, natsH, stateRSS = fmt.Sprintf("etcd ×%d cores, sum (idle)", n), fmt.Sprintf("NATS ×%d cores, sum (idle)", n), "RSS, sum (largest)"
	}
	fmt.Fprintf(&b, "| # | system | window | leader cores (idle) | ms/msg (marginal) | peak RSS | workers cores, sum (idle) | ms/msg (marginal) | peak RSS each | %s | ms/msg (marginal) | %s | %s | ms/msg (marginal) | %s | sim cores | load-process cores | all measured cores | machine: other CPU, cores |\n",
		etcdH, stateRSS, natsH, stateRSS)
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i, r := range rs {
		leader := "leader " + r.leader
		if r.kind == "naive" {
			leader = "naive bot"
		}
		_, wrss := r.workers()
		var wr, workers []string
		for _, role := range r.roles() {
			if strings.HasPrefix(role, "worker") {
				workers = append(workers, role)
			}
		}
		for _, k := range wrss {
			wr = append(wr, mb(k))
		}
		total := 0.0
		for _, role := range r.roles() {
			total += r.cores(role)
		}
		cell := func(roles ...string) (string, string, string) {
			var cores, idle, per, marg float64
			var rss []string
			for _, role := range roles {
				u, ok := r.usage[role]
				if !ok {
					return "–", "–", "–"
				}
				cores += r.cores(role)
				idle += r.idleCores(role)
				per += r.perMsg(role)
				marg += r.marginalPerMsg(role)
				rss = append(rss, mb(u.PeakRSS))
			}
			if len(roles) == 0 {
				return "–", "–", "–"
			}
			return fmt.Sprintf("%.2f (%.2f)", cores, idle), fmt.Sprintf("%.1f (%.1f)", per, marg), strings.Join(rss, ", ")
		}
		lc, lm, lr := cell(leader)
		wc, wm, _ := cell(workers...)
		// etcd and NATS: every member summed, so that the columns mean the
		// same on one member as on three.
		group := func(name string) (string, string, string) {
			var roles []string
			var sum, top int64
			for _, role := range r.roles() {
				if memberOf(role, name) {
					roles = append(roles, role)
					sum += r.usage[role].PeakRSS
					top = max(top, r.usage[role].PeakRSS)
				}
			}
			c, m, rss := cell(roles...)
			if len(roles) > 1 {
				rss = fmt.Sprintf("%s (%s)", mb(sum), mb(top))
			}
			return c, m, rss
		}
		ec, em, er := group(etcdRole)
		nc, nm, nr := group(natsRole)
		sc, _, _ := cell("sim")
		pc, _, _ := cell("load (this process)")
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f | %.2f |\n",
			i+1, r.label(), secs(r.wall), lc, lm, lr, wc, wm, strings.Join(wr, ", "), ec, em, er, nc, nm, nr, sc, pc, total, r.otherCores())
	}

	b.WriteString("\n## Targets (issue 12), default settings\n\n")
	for _, r := range rs {
		if r.kind == "botctl" && r.nodes == 3 && r.conversations == 5000 && r.rate == 500 {
			p := r.receipt.pct(.99)
			fmt.Fprintf(&b, "- Receipt p99 ≤ 20 ms at 500 new messages/s over 5,000 conversations, three nodes: p99 %s — %s.\n", ms(p), verdict(p <= 20*time.Millisecond && r.receiptMissing == 0, fmt.Sprintf("by %s", ms(p-20*time.Millisecond))))
			if h := r.leaderReceipt; len(h.counts) > 0 {
				fmt.Fprintf(&b, "  Inside the leader (its histogram `botctl_receipt_latency_seconds`: the callback read off the connection → WeCom's ack, interpolated in power-of-two buckets): p50 %s, p99 %s over %.0f receipts; the rest of the outside figure is the callback's and the frame's way through the WebSocket and the simulator's scheduling.\n",
					ms(time.Duration(h.quantile(.5)*float64(time.Second))), ms(time.Duration(h.quantile(.99)*float64(time.Second))), h.counts[len(h.counts)-1])
				for _, st := range []string{"slot", "dedupe", "dispatch", "receipt_frame"} {
					if h, ok := r.leaderStages[st]; ok && len(h.counts) > 0 {
						fmt.Fprintf(&b, "  - stage %s (`botctl_inbound_stage_seconds`): p50 %s, p99 %s\n", st,
							ms(time.Duration(h.quantile(.5)*float64(time.Second))), ms(time.Duration(h.quantile(.99)*float64(time.Second))))
					}
				}
				if r.leaderInbound != "" {
					fmt.Fprintf(&b, "  - the leader's inbound counters (`botctl_inbound_total`; early_receipts: sent before the publish, the dedupe read skipped): %s\n", r.leaderInbound)
				}
			} else if r.leaderErr != "" {
				fmt.Fprintf(&b, "  The leader's own receipt histogram could not be read: %s.\n", r.leaderErr)
			}
		}
		if r.kind == "botctl" && r.nodes == 3 && r.conversations >= 10000 {
			p := max(r.progressLag.pct(.99), r.finalLag.pct(.99))
			fmt.Fprintf(&b, "- At 10,000 live conversations (peak live measured: %d), push lag p99 ≤ 3 s: p99 %s (progress %s, final %s) — %s; quota violations %d — %s; lost %d, duplicated %d.\n",
				r.peakLive, ms(p), ms(r.progressLag.pct(.99)), ms(r.finalLag.pct(.99)), verdict(p <= 3*time.Second, fmt.Sprintf("by %s", secs(p-3*time.Second))),
				r.quota, verdict(r.quota == 0, fmt.Sprintf("%d", r.quota)), r.lost, r.dup)
			if r.answered > 0 {
				fmt.Fprintf(&b, "  Frames accepted: %d, %.1f per answer (receipt, progress, status lines, final): a lag figure counts only the versions a frame showed, so fewer frames would flatter it.\n",
					r.framesTotal, float64(r.framesTotal)/float64(r.answered))
			}
			if len(r.finalWorker) > 0 {
				fmt.Fprintf(&b, "  The final frame's lag split at the task record's exec → succeeded time: the answer's last output write → its Finish recorded (the worker) p50 %s, p99 %s; → the final frame accepted (the notice, the pusher's step, the intent's write, the frame) p50 %s, p99 %s.\n",
					ms(r.finalWorker.pct(.5)), ms(r.finalWorker.pct(.99)), ms(r.finalPusher.pct(.5)), ms(r.finalPusher.pct(.99)))
			}
		}
	}
	var one, three *stepResult
	for _, r := range rs {
		if r.kind == "botctl" && r.nodes == 1 {
			one = r
		}
		if r.kind == "botctl" && r.nodes == 3 && one != nil && r.conversations == one.conversations && r.answer == one.answer {
			three = r
		}
	}
	if one != nil && three != nil && one.throughput > 0 {
		fmt.Fprintf(&b, "\n## One node against three\n\n%d conversations at %.0f/s, %s answers (a backlog for one node): one node %.1f answers/s, three nodes %.1f answers/s: **ratio %.2f**. One node leading computes with `worker.leader_slots` (%d); three nodes add two nodes of `worker.slots` (%d each).\n",
			one.conversations, one.rate, one.answer, one.throughput, three.throughput, three.throughput/one.throughput, config.Defaults().Worker.LeaderSlots, config.Defaults().Derived().Worker.Slots)
	}

	for _, nv := range rs {
		if nv.kind != "naive" {
			continue
		}
		var bc *stepResult
		for _, r := range rs {
			if r.kind == "botctl" && r.nodes == 3 && r.conversations == nv.conversations && r.rate == nv.rate && r.answer == nv.answer {
				bc = r
			}
		}
		if bc == nil {
			continue
		}
		sum := func(r *stepResult) (cores, perMsg, mbs float64) {
			for _, role := range r.roles() {
				if role == "sim" || role == "load (this process)" {
					continue
				}
				cores += r.cores(role)
				perMsg += r.perMsg(role)
				mbs += float64(r.usage[role].PeakRSS) / 1024
			}
			return
		}
		bcC, bcM, bcR := sum(bc)
		nvC, nvM, nvR := sum(nv)
		fmt.Fprintf(&b, "\n## botctl beside the naive bot (same simulator, same load: %d conversations at %.0f/s, %s answers)\n\n", nv.conversations, nv.rate, nv.answer)
		fmt.Fprintf(&b, "The naive bot is one process holding the WeCom connection (the same client, pkg/wecom), a goroutine and a ticker per conversation, no etcd, no NATS, no record. It does the WeCom work botctl does under the same quota: the receipt, the answer streamed from the same demo backend, each tick (`-naive-tick` = %s, botctl's progress gap at its default `push.budget` of %d frames a minute, unless the command says otherwise) the answer so far if it changed, and the whole answer with finish once the answer time is up; a progress frame WeCom refuses is skipped, a final frame refused for the quota (45009) is sent again every %s until it is accepted or the stream's window is over. botctl's figures are its three nodes, etcd and NATS together; neither counts the simulator or the load generator.\n\n",
			naiveTick.Round(time.Millisecond), config.Defaults().Push.Budget, naiveRetry)
		b.WriteString("| | receipt p50 | receipt p99 | completion over answer p99 | answered | quota violations | most frames in 60 s | CPU, cores | CPU per message | peak RSS, sum |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, x := range []struct {
			name    string
			r       *stepResult
			c, m, s float64
		}{{"botctl, 3 nodes", bc, bcC, bcM, bcR}, {"naive bot", nv, nvC, nvM, nvR}} {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %d/%d | %d | %d | %.2f | %.1f ms | %.0f MB |\n", x.name, ms(x.r.receipt.pct(.5)), ms(x.r.receipt.pct(.99)),
				secs(x.r.completion.pct(.99)-x.r.answer), x.r.answered, x.r.conversations, x.r.quota, x.r.maxPer60, x.c, x.m, x.s)
		}
	}

	b.WriteString(costSection(rs))

	for i, r := range rs {
		if r.kind == "botctl" {
			b.WriteString(timelineSection(r, i+1))
		}
	}

	var profiled []int
	for i, r := range rs {
		if len(r.profiles) > 0 {
			profiled = append(profiled, i)
		}
	}
	if len(profiled) > 0 {
		b.WriteString("\n## Profiles (perf, sampled from outside during the step)\n")
		for _, i := range profiled {
			r := rs[i]
			fmt.Fprintf(&b, "\n### Step %d: %s, %d conversations at %.0f/s, %s answers\n", i+1, r.label(), r.conversations, r.rate, r.answer)
			for _, role := range sortedKeys(r.profiles) {
				fmt.Fprintf(&b, "\n<details><summary>%s (%.2f cores, %.2f ms CPU per message)</summary>\n\n```\n%s```\n</details>\n", role, r.cores(role), r.perMsg(role), r.profiles[role])
			}
		}
	}
	b.WriteString(pprofSection(rs))
	for i, r := range rs {
		if r.subjects == nil {
			continue
		}
		fmt.Fprintf(&b, "\n## NATS messages, step %d: %s, %d conversations at %.0f/s, %s answers\n\n", i+1, r.label(), r.conversations, r.rate, r.answer)
		b.WriteString("Counted by a subscriber on `>` in the nodes' account (client publishes, API requests, acks, deliveries to inboxes; not the servers' routes or Raft). The counter adds a delivery per message: this step's timings are not clean.\n\n")
		b.WriteString(subjectTable(r.subjects, r.answered))
		if r.ops != nil {
			fmt.Fprintf(&b, "\n### By operation, with bytes (step %d)\n\n", i+1)
			b.WriteString("The same messages by kind of operation (KV writes by the headers nats.go sets, acks by their body, a reply named by its request), with bytes on the client connection (subject, reply, headers, payload). The load harness's own watch of the output bucket is taken out. Sent by the leader: the share of the kind's messages whose inbox (a request's reply subject, a reply's subject) is that of the connection publishing the tasks; – where no inbox tells.\n\n")
			b.WriteString(opTable(r.ops, r.answered, r.harnessWatch))
		}
	}
	for i, r := range rs {
		if r.err != "" || r.gen.errors > 0 {
			fmt.Fprintf(&b, "\n- step %d: error %q; %d posts failed (first: %s)\n", i+1, r.err, r.gen.errors, r.gen.firstErr)
		}
	}
	return b.String()
}

func answering(r *stepResult) string {
	if r.kind == "naive" {
		return "all"
	}
	return fmt.Sprint(r.peakAnswering)
}

func verdict(ok bool, missed string) string {
	if ok {
		return "**met**"
	}
	return "**missed** (" + missed + ")"
}

// timelineSection shows a step second by second while its messages
// arrive: the receipts of the callbacks written in each second beside
// the CPU each part of the deployment and the whole machine spent in it,
// and the answers being written. It shows when the receipt's latency
// rises and what the machine was doing then (where it breaks first).
func timelineSection(r *stepResult, n int) string {
	if len(r.ticks) < 2 || len(r.receiptAt) == 0 {
		return ""
	}
	var lastAsk time.Time
	for _, x := range r.receiptAt {
		if x.at.After(lastAsk) {
			lastAsk = x.at
		}
	}
	groups := []string{"leader", "worker", "nats", "etcd", "sim"}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Timeline, step %d: %s, %d conversations at %.0f/s, %s answers\n\n", n, r.label(), r.conversations, r.rate, r.answer)
	fmt.Fprintf(&b, "Each row is one second of the sampler (from its first reading, just before the first message). Receipts: of the callbacks written in that second. Answering: answers being written at the second's end (first output write → complete answer shown). Cores: CPU spent in the second (USER_HZ resolution, ±0.01 per process); machine = every CPU's busy time (/proc/stat) out of %d, steal included; steal = the hypervisor running something else while this VM had work (a noisy neighbour).\n\n", runtime.NumCPU())
	b.WriteString("| s | callbacks | receipt p50 | p99 | max | answering | machine cores | steal | leader | workers | NATS ×3 | etcd ×3 | sim |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i := 0; i+1 < len(r.ticks); i++ {
		from, to := r.ticks[i], r.ticks[i+1]
		if from.at.After(lastAsk.Add(5 * time.Second)) {
			break
		}
		var d dist
		for _, x := range r.receiptAt {
			if !x.at.Before(from.at) && x.at.Before(to.at) {
				d = append(d, x.d)
			}
		}
		d = d.sorted()
		answering := 0
		for _, a := range r.answerAt {
			if !a.from.After(to.at) && a.to.After(to.at) {
				answering++
			}
		}
		wall := to.at.Sub(from.at).Seconds()
		cores := func(prefix string) string {
			var sum time.Duration
			for role, c := range to.cpu {
				if strings.HasPrefix(role, prefix) {
					sum += c - from.cpu[role]
				}
			}
			return fmt.Sprintf("%.2f", sum.Seconds()/wall)
		}
		p50, p99, mx := "", "", ""
		if len(d) > 0 {
			p50, p99, mx = ms(d.pct(.5)), ms(d.pct(.99)), ms(d.max())
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %s | %s | %d | %.2f | %.2f |", i, len(d), p50, p99, mx, answering, (to.busy-from.busy).Seconds()/wall, (to.steal-from.steal).Seconds()/wall)
		for _, g := range groups {
			fmt.Fprintf(&b, " %s |", cores(g))
		}
		b.WriteString("\n")
	}
	return b.String()
}
