// Command drill runs `botctl drill`'s rounds of every kind on real botctl
// processes with the default configuration (one `botctl infra`, one
// `botctl sim`, three `botctl serve` nodes) and writes a report:
//
//	go run ./test/drill -rounds 10 -out bench/drill.md
//
// kill-leader rounds have a restarter playing systemd (Restart=always,
// RestartSec=5s): a killed node is started again 5 s after it died. The
// silence drill needs a baseline for the current hour of the week, so a
// warm-up sends traffic until the bot's baseline has an opinion (by default
// 10 minutes of observation). The gap kind is a drop with reconnection
// refused for -gap (default 2m): the users' messages of that gap are found
// by the backfill. The wecom-gap kind is the same gap read from WeCom's own
// message history (`botctl drill --wecom-history`): its bot has nodes of its
// own (n10-n12) run with backfill.history_url unset, and the simulator
// authorizes the bot's msg history. The group-silence kind withholds group
// callbacks only; its bot has nodes of its own (n7-n9) run with
// health.silence_min_watched at -group-min-watched, so the group's own
// baseline has an opinion after a warm-up of about that long (at the
// default, 10m, the warm-up lasts ten minutes).
//
// Each kind runs on its own bot (b-drop, b-stall, …, b-gap), and the next
// kind starts only once the merge window (alert.window, 60 s) since the
// previous one has passed, so the alerts of one kind's incidents are
// neither folded into another kind's flapping summary nor merged with its
// incidents. kill-leader's bot has three nodes of its own (n4-n6; the
// other bots are on n1-n3): the node a round kills leads that bot alone,
// as in the one-bot drill, instead of taking other kinds' bots down with
// it (a merged alert, by design, for a node that led several bots).
package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/heal/drill"
	"github.com/botctl/botctl/pkg/heal/health"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/test/e2e/cluster"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

type kindRun struct {
	name   string // report name: drop, gap, revoke, …
	kind   string
	dur    time.Duration
	rounds int
	// wecomHistory: the gap is read from WeCom's own history (the bot's
	// nodes have no backfill.history_url).
	wecomHistory bool
}

// bot is the run's own bot.
func (r kindRun) bot() string { return "b-" + r.name }

// mergeWindow is alert.window's default: incidents of two bots detected
// within it of each other make one merged alert.
const mergeWindow = 60 * time.Second

func main() {
	var (
		rounds     = flag.Int("rounds", 10, "rounds per kind")
		gapRounds  = flag.Int("gap-rounds", 3, "rounds of the 2-minute gap (each takes over 2 minutes)")
		gap        = flag.Duration("gap", 2*time.Minute, "the gap kind's outage")
		kinds      = flag.String("kinds", "silence,drop,stall,revoke,kill-leader,gap,wecom-gap,group-silence", "comma-separated, run in this order: drop, stall, silence, revoke, kill-leader, gap, wecom-gap, group-silence (silence first: its bot's baseline learns from every minute it is connected, idle ones too)")
		groupWatch = flag.Duration("group-min-watched", 2*time.Minute, "group-silence: its nodes' health.silence_min_watched (about how long the group's warm-up lasts)")
		out        = flag.String("out", "", "write a markdown report here (and a .csv beside it)")
		restartGap = flag.Duration("restart-after", 5*time.Second, "kill-leader: start a killed node again after this (systemd's RestartSec)")
	)
	flag.Parse()
	var runs []kindRun
	for _, k := range strings.Split(*kinds, ",") {
		switch k = strings.TrimSpace(k); k {
		case "gap":
			runs = append(runs, kindRun{name: "gap", kind: drill.KindDrop, dur: *gap, rounds: *gapRounds})
		case "wecom-gap":
			runs = append(runs, kindRun{name: "wecom-gap", kind: drill.KindDrop, dur: *gap, rounds: *gapRounds, wecomHistory: true})
		case drill.KindDrop, drill.KindStall, drill.KindSilence, drill.KindRevoke, drill.KindKillLeader, drill.KindGroupSilence:
			runs = append(runs, kindRun{name: k, kind: k, rounds: *rounds})
		default:
			fmt.Fprintf(os.Stderr, "drill: -kinds: unknown %q\n", k)
			os.Exit(2)
		}
	}
	// every bot; the bots of n1-n3; of n4-n6; of n7-n9; of n10-n12
	var bots, shared, killers, groups, wecomGaps []string
	for _, run := range runs {
		if slices.Contains(bots, run.bot()) {
			continue
		}
		bots = append(bots, run.bot())
		switch {
		case run.kind == drill.KindKillLeader:
			killers = append(killers, run.bot())
		case run.kind == drill.KindGroupSilence:
			groups = append(groups, run.bot())
		case run.wecomHistory:
			wecomGaps = append(wecomGaps, run.bot())
		default:
			shared = append(shared, run.bot())
		}
	}

	start := time.Now()
	dir, err := os.MkdirTemp("", "botctl-drill-")
	check(err)
	defer os.RemoveAll(dir)
	bin, err := cluster.Build(dir)
	check(err)
	c, err := cluster.Start(cluster.Options{Bin: bin, Dir: dir, Bots: bots, TTL: 20 * time.Second, Margin: 5 * time.Second, StartTimeout: 60 * time.Second})
	if err != nil {
		fail(c, err)
	}
	// Alerts go to the simulator's group robot: one sink, as an operator
	// configures one (every other alert setting at its default).
	robotFile := filepath.Join(dir, "robot.url")
	check(os.WriteFile(robotFile, []byte(c.SimHTTP+"/cgi-bin/webhook/send?key=drill\n"), 0o600))
	c.Opts.NodeArgs = append(c.Opts.NodeArgs, "--alert-wecom-robot-url-file", robotFile)
	defer c.Close()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		c.Close()
		os.Exit(130)
	}()
	killIDs := []string{"n4", "n5", "n6"} // the nodes kill-leader kills, and its restarter starts again
	for _, group := range []struct {
		ids  []string
		bots []string
		args []string
	}{
		{[]string{"n1", "n2", "n3"}, shared, nil},
		{killIDs, killers, nil},
		{[]string{"n7", "n8", "n9"}, groups, []string{"--health-silence-min-watched", groupWatch.String()}},
		// No history URL: the gap backfill reads WeCom's own message history.
		{[]string{"n10", "n11", "n12"}, wecomGaps, []string{"--backfill-history-url="}},
	} {
		if len(group.bots) == 0 {
			continue
		}
		for _, id := range group.ids {
			if _, err := c.StartNodeWith(id, cluster.NodeOptions{Bots: group.bots, Args: group.args}); err != nil {
				fail(c, err)
			}
		}
	}

	nc, err := nats.Connect(c.NATSURL)
	check(err)
	defer nc.Close()
	js, err := natsjs.New(nc)
	check(err)
	ctx := context.Background()
	store, err := jetstream.Declare(ctx, js, jetstream.Options{})
	check(err)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.EtcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	check(err)
	defer cli.Close()

	results := map[string][]drill.Round{}
	var warmup time.Duration
	var lastDetected time.Time // the previous kind's last incident
	for _, run := range runs {
		bot := run.bot()
		if run.kind == drill.KindSilence {
			t0 := time.Now()
			fmt.Printf("== warm-up: traffic until the silence baseline of %s has an opinion for this hour of the week\n", bot)
			if err := warm(ctx, c, store, bot, 30*time.Minute); err != nil {
				fail(c, err)
			}
			warmup = time.Since(t0)
			fmt.Printf("   warm after %s\n", warmup.Round(time.Second))
		}
		// The drill waits AlertWait (75 s) after its last injection, but a
		// takeover is detected up to a TTL (20 s) after it.
		if wait := time.Until(lastDetected.Add(mergeWindow + 5*time.Second)); !lastDetected.IsZero() && wait > 0 {
			fmt.Printf("== waiting %s: the previous kind's last incident out of the merge window\n", wait.Round(time.Second))
			time.Sleep(wait)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if run.kind == drill.KindKillLeader {
			wg.Go(func() { restarter(c, killIDs, *restartGap, stop) })
		}
		d, err := drill.New(ctx, drill.Config{Bot: bot, Kind: run.kind, Rounds: run.rounds, Sim: c.SimHTTP, Duration: run.dur,
			WeComHistory: run.wecomHistory, MinWatched: *groupWatch,
			Incidents: incident.NewStore(store.Incidents()), Health: store.Health(),
			Nodes:    func(ctx context.Context) ([]node.Info, error) { return node.Nodes(ctx, cli, "/botctl/") },
			Progress: os.Stdout})
		if err != nil {
			fail(c, err)
		}
		fmt.Printf("== %s: %d rounds on bot %s\n", run.name, run.rounds, bot)
		rs, err := d.Run(ctx, func(r drill.Round) {
			fmt.Printf("%s round %d: T1 %.2fs T2 %.3fs (auto %.3fs, human %.3fs) T3 %.2fs down %.2fs sent %d lost %d filled %d resubscribes %d %s\n",
				run.name, r.N, r.T1, r.T2, r.T2Auto, r.T2Human, r.T3, r.Downtime, r.Sent, r.Lost, r.Filled, r.Resubscribes, r.Error)
		})
		close(stop)
		wg.Wait()
		if err != nil {
			fail(c, err)
		}
		results[run.name] = rs
		lastDetected = detectedBy(rs, time.Now())
	}
	var kicks int64
	for _, b := range bots {
		st, _ := c.Stats(b)
		kicks += st.Kicks
	}
	report(*out, runs, results, warmup, *groupWatch, kicks, time.Since(start))
}

// detectedBy is when the last incident of rs was detected: its injection
// plus the T1 the drill measured from it; end (now) if a round failed,
// as its incident may have come at any time.
func detectedBy(rs []drill.Round, end time.Time) time.Time {
	var last time.Time
	for _, r := range rs {
		if r.Error != "" {
			return end
		}
		if at := r.Injected.Add(time.Duration(r.T1 * float64(time.Second))); at.After(last) {
			last = at
		}
	}
	return last
}

// warm sends one message a second to bot until its baseline has an opinion
// for the current hour of the week (with the default limits) that finds a
// silence within warmThreshold. An opinion alone is not enough: the
// baseline counts every minute the bot was connected, and a bot left idle
// while other kinds ran (each kind has its own bot) learnt that it is
// quiet: its first opinion was "a silence over 1m55s", and a 30 s silence
// round then never opened an incident.
func warm(ctx context.Context, c *cluster.Cluster, store *jetstream.Store, bot string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for k := 0; ; k++ {
		if _, err := c.PostMessage(bot, fmt.Sprintf("warm-%d", k%50), fmt.Sprintf("warm-up %d", k)); err != nil {
			return err
		}
		if k%10 == 0 {
			e, err := store.Health().Get(ctx, "baseline."+jetstream.EncodeToken(bot))
			if err == nil {
				var b health.Baseline
				if json.Unmarshal(e.Value(), &b) == nil {
					if thr, ok := b.Threshold(time.Now(), time.Local, health.BaselineLimits{}); ok {
						fmt.Printf("   baseline: a silence over %s is suspicious now\n", thr.Round(time.Millisecond))
						if thr <= warmThreshold {
							return nil
						}
					}
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("baseline still without an opinion after %s", limit)
		}
		time.Sleep(time.Second)
	}
}

// warmThreshold is the silence threshold warm waits for: the silence
// rounds last 30 s, and T1's target is 10 s.
const warmThreshold = 10 * time.Second

// restarter starts a node again restartAfter after its process died, as
// systemd would.
func restarter(c *cluster.Cluster, ids []string, restartAfter time.Duration, stop chan struct{}) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		alive := map[string]bool{}
		for _, n := range c.Alive() {
			alive[n.ID] = true
		}
		for _, id := range ids {
			if alive[id] {
				continue
			}
			select {
			case <-stop:
				return
			case <-time.After(restartAfter):
			}
			if _, err := c.RestartNode(id); err != nil {
				fmt.Printf("restart %s: %v\n", id, err)
			} else {
				fmt.Printf("restarted %s (as systemd would)\n", id)
			}
		}
	}
}

func report(out string, runs []kindRun, results map[string][]drill.Round, warmup, groupWatch time.Duration, kicks int64, took time.Duration) {
	goVersion := runtime.Version()
	if v, err := exec.Command("go", "version").Output(); err == nil {
		goVersion = strings.TrimSpace(string(v))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Drills: T1, T2, T3 and messages lost per kind of outage\n\n")
	fmt.Fprintf(&b, "Command: `go run ./test/drill %s`  \n", strings.Join(os.Args[1:], " "))
	fmt.Fprintf(&b, "Date: %s; nproc %d; %s; took %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), goVersion, took.Round(time.Second))
	fmt.Fprintf(&b, "Default configuration: one `botctl infra` (embedded etcd and NATS), one `botctl sim`, three `botctl serve` nodes "+
		"(election TTL 20s, margin 5s, every health, recovery and alert key at its default; alerts to the simulator's group robot). "+
		"Each kind runs on its own bot (`b-<kind>`), the next kind once the previous one's incidents are out of the merge window (60 s), "+
		"so no kind's alerts fold into another's flapping summary or merge with its incidents; kill-leader's bot has three nodes of its own, "+
		"so the node a round kills leads that bot alone. Each round: user traffic of one message a second, "+
		"each from its own conversation; the fault; the incident waited for until it closes; then every message checked in the simulator's "+
		"transcript (a finished stream or a pushed answer). T1 here counts from the injection (the drill knows it); the incident's own T1 "+
		"counts from its last evidence and is in the CSV. T2 and T3 are the incident's.\n\n")
	for _, run := range runs {
		switch {
		case run.kind == drill.KindGroupSilence:
			fmt.Fprintf(&b, "group-silence's bot has three nodes of its own (n7-n9) run with health.silence_min_watched %s instead of 10m, so each round's warm-up "+
				"(a group message every 3 s until the group's own baseline has an opinion) lasts minutes, not ten; every fifth message of its traffic is in that group.\n\n", groupWatch)
		case run.wecomHistory:
			fmt.Fprintf(&b, "%s's bot has three nodes of its own (n10-n12) run with backfill.history_url unset: the gap is read from WeCom's own message history "+
				"(the simulator's msg MCP server, authorized by the drill).\n\n", run.name)
		}
	}
	if warmup > 0 {
		fmt.Fprintf(&b, "The silence rounds followed a warm-up of %s of traffic, until the baseline had an opinion for the hour of the week.\n\n", warmup.Round(time.Second))
	}
	fmt.Fprintf(&b, "T2 is split as `botctl incidents report` splits it: T2 auto (detected → botctl's first automatic step, over the rounds botctl acted on first) "+
		"and T2 human (detected → a person's first acknowledgement; the revoke drill plays the person). Late is the gap's messages the incident's backfill answered late.\n\n")
	fmt.Fprintf(&b, "| kind | rounds | failed | T1 p50 | T1 p90 | T1 max | T2 p50 | T2 max | T2 auto p50 | T2 auto max | T2 human p50 | T2 human max | T3 p50 | T3 p90 | T3 max | downtime p50 | sent | lost | late | alerts per incident | page max |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, run := range runs {
		rs := results[run.name]
		s := drill.Summarize(rs)
		var downs []time.Duration
		for _, r := range rs {
			if r.Error == "" {
				downs = append(downs, time.Duration(r.Downtime*float64(time.Second)))
			}
		}
		d := incident.SpreadOf(downs)
		perInc := map[string]int{}
		page := "-"
		maxPage := -1.0
		for _, r := range rs {
			perInc[strings.Join(r.AlertKinds, "+")]++
			if r.Page > maxPage {
				maxPage = r.Page
			}
		}
		if maxPage >= 0 {
			page = fmt.Sprintf("%.2fs", maxPage)
		}
		var shapes []string
		for k, n := range perInc {
			if k == "" {
				k = "none"
			}
			shapes = append(shapes, fmt.Sprintf("%s ×%d", k, n))
		}
		sort.Strings(shapes)
		filled := 0
		for _, r := range rs {
			filled += r.Filled
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.2fs | %.2fs | %.2fs | %.3fs | %.3fs | %s | %s | %s | %s | %.2fs | %.2fs | %.2fs | %.2fs | %d | %d | %d | %s | %s |\n",
			run.name, s.Rounds, s.Failed, s.T1.Median, s.T1.P90, s.T1.Max, s.T2.Median, s.T2.Max,
			spreadCell(s.T2Auto.N, s.T2Auto.Median), spreadCell(s.T2Auto.N, s.T2Auto.Max), spreadCell(s.T2Human.N, s.T2Human.Median), spreadCell(s.T2Human.N, s.T2Human.Max),
			s.T3.Median, s.T3.P90, s.T3.Max, d.Median, s.Sent, s.Lost, filled, strings.Join(shapes, ", "), page)
	}
	fmt.Fprintf(&b, "\nKicks at the simulator over the whole run (ping-pong): %d.\n", kicks)
	fmt.Println(b.String())
	if out == "" {
		return
	}
	check(os.MkdirAll(filepath.Dir(out), 0o755))
	check(os.WriteFile(out, []byte(b.String()), 0o644))
	f, err := os.Create(strings.TrimSuffix(out, ".md") + ".csv")
	check(err)
	defer f.Close()
	w := csv.NewWriter(f)
	w.Write([]string{"kind", "round", "incident", "level", "method", "signal", "t1_s", "t1_recorded_s", "t2_s", "t2_auto_s", "t2_human_s", "t3_s", "downtime_s",
		"sent", "answered", "lost", "filled", "not_filled", "resubscribes", "alerts", "first_alert_s", "page_s", "error"})
	for _, run := range runs {
		for _, r := range results[run.name] {
			w.Write([]string{run.name, fmt.Sprint(r.N), r.Incident, r.Level, r.Method, r.Signal, f3(r.T1), f3(r.T1Recorded), f3(r.T2), f3(r.T2Auto), f3(r.T2Human), f3(r.T3), f3(r.Downtime),
				fmt.Sprint(r.Sent), fmt.Sprint(r.Answered), fmt.Sprint(r.Lost), fmt.Sprint(r.Filled), fmt.Sprint(r.NotFilled), fmt.Sprint(r.Resubscribes),
				strings.Join(r.AlertKinds, "+"), f3(r.FirstAlert), f3(r.Page), r.Error})
		}
	}
	w.Flush()
	check(w.Error())
}

func f3(v float64) string { return fmt.Sprintf("%.3f", v) }

// spreadCell is a T2 split cell: "-" over no round.
func spreadCell(n int, v float64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3fs", v)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "drill:", err)
		os.Exit(1)
	}
}

func fail(c *cluster.Cluster, err error) {
	fmt.Fprintln(os.Stderr, "drill:", err)
	if c != nil {
		fmt.Fprintln(os.Stderr, c.Dump(40))
		c.Close()
	}
	os.Exit(1)
}
