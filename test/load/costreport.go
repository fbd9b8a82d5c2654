package main

import (
	"fmt"
	"strings"
	"time"
)

// costSection is issue 28's figures: botctl's cost as a ratio of the naive
// bot's in the same run (CPU per answer, receipt p99), memory per live
// conversation, and how the cost per answer grows from the smallest to
// the largest step of one rate and answer time.
func costSection(rs []*stepResult) string {
	var b strings.Builder
	b.WriteString("\n## Cost against the naive bot (issue 28)\n\n")
	b.WriteString("Each ratio is botctl's three nodes with etcd and NATS (every measured process but the simulator and the load generator) over the naive bot's one process, in the same run at the same load. Targets: CPU per answer ≤ 3×, receipt p99 ≤ 2× (at 500/s over 5,000 conversations).\n\n")
	b.WriteString("| load | botctl CPU per answer | naive | ratio | target | botctl receipt p99 | naive | ratio | target |\n|---|---|---|---|---|---|---|---|---|\n")
	pairs := 0
	for _, nv := range rs {
		if nv.kind != "naive" {
			continue
		}
		bc := sameLoad(rs, nv)
		if bc == nil {
			continue
		}
		pairs++
		bcM, nvM := measuredPerMsg(bc), measuredPerMsg(nv)
		bcR, nvR := bc.receipt.pct(.99), nv.receipt.pct(.99)
		receiptTarget := "–"
		if nv.conversations == 5000 && nv.rate == 500 {
			receiptTarget = verdict(float64(bcR) <= 2*float64(nvR), "over 2×")
		}
		fmt.Fprintf(&b, "| %d conversations at %.0f/s, %s answers | %.1f ms | %.1f ms | %.2f× | %s | %s | %s | %.2f× | %s |\n",
			nv.conversations, nv.rate, nv.answer, bcM, nvM, bcM/nvM, verdict(bcM <= 3*nvM, "over 3×"), ms(bcR), ms(nvR), float64(bcR)/float64(nvR), receiptTarget)
	}
	if pairs == 0 {
		b.WriteString("| (no naive step with a botctl step of the same load) | | | | | | | | |\n")
	}

	// The steps of the most common rate and answer time, by size.
	var series []*stepResult
	for _, r := range rs {
		if r.kind == "botctl" && r.nodes == 3 && r.rate == 500 && r.answer == rs2answer(rs) {
			series = append(series, r)
		}
	}
	if len(series) < 2 {
		return b.String()
	}
	first, last := series[0], series[len(series)-1]
	fmt.Fprintf(&b, "\n### Growth from %d to %d conversations (three nodes, %.0f/s, %s answers)\n\n", first.conversations, last.conversations, first.rate, first.answer)
	b.WriteString("CPU per answer (ms) and peak RSS (MB) per kind of process, and RSS growth per 1,000 live conversations (peak live) between the smallest and the largest step. Workers: the sum over the two standby nodes (RSS: the larger); etcd and NATS: the sum over their three members.\n\n")
	b.WriteString("| step | peak live (answering) |")
	for _, g := range costGroups {
		fmt.Fprintf(&b, " %s ms/answer | %s RSS |", g, g)
	}
	b.WriteString(" all ms/answer |\n|---|---|")
	b.WriteString(strings.Repeat("---|---|", len(costGroups)))
	b.WriteString("---|\n")
	for _, r := range series {
		fmt.Fprintf(&b, "| %d@%.0f/%s | %d (%d) |", r.conversations, r.rate, r.answer, r.peakLive, r.peakAnswering)
		for _, g := range costGroups {
			cpu, rss := groupCost(r, g)
			fmt.Fprintf(&b, " %.1f | %.0f MB |", cpu, rss)
		}
		fmt.Fprintf(&b, " %.1f |\n", measuredPerMsg(r))
	}
	b.WriteString("| RSS growth per 1,000 live | |")
	dl := float64(last.peakLive-first.peakLive) / 1000
	for _, g := range costGroups {
		_, r0 := groupCost(first, g)
		_, r1 := groupCost(last, g)
		if dl > 0 {
			fmt.Fprintf(&b, " | %.1f MB |", (r1-r0)/dl)
		} else {
			b.WriteString(" | – |")
		}
	}
	b.WriteString(" |\n")
	return b.String()
}

// costGroups are the kinds of process the growth table sums.
var costGroups = []string{"leader", "workers", "etcd", "NATS"}

// groupCost is g's CPU per answer (ms) and peak RSS (MB: workers the
// larger, etcd and NATS the sum) in r.
func groupCost(r *stepResult, g string) (cpu, rss float64) {
	for _, role := range r.roles() {
		mb := float64(r.usage[role].PeakRSS) / 1024
		switch {
		case g == "leader" && strings.HasPrefix(role, "leader"):
			cpu, rss = cpu+r.perMsg(role), rss+mb
		case g == "workers" && strings.HasPrefix(role, "worker"):
			cpu, rss = cpu+r.perMsg(role), max(rss, mb)
		case g == "etcd" && memberOf(role, etcdRole), g == "NATS" && memberOf(role, natsRole):
			cpu, rss = cpu+r.perMsg(role), rss+mb
		}
	}
	return cpu, rss
}

// measuredPerMsg is the CPU per answer (ms) of every measured process but
// the simulator and the load generator.
func measuredPerMsg(r *stepResult) float64 {
	ms := 0.0
	for _, role := range r.roles() {
		if role == "sim" || strings.HasPrefix(role, "load") {
			continue
		}
		ms += r.perMsg(role)
	}
	return ms
}

// sameLoad is the three-node botctl step of nv's load, if any.
func sameLoad(rs []*stepResult, nv *stepResult) *stepResult {
	var bc *stepResult
	for _, r := range rs {
		if r.kind == "botctl" && r.nodes == 3 && r.conversations == nv.conversations && r.rate == nv.rate && r.answer == nv.answer {
			bc = r
		}
	}
	return bc
}

// rs2answer is the answer time of the growth series: of the 500/s
// three-node steps, the answer time most of them share (the longest on a
// tie), so that a backlog step of short answers does not hide the series.
func rs2answer(rs []*stepResult) time.Duration {
	count := map[time.Duration]int{}
	var best time.Duration
	for _, r := range rs {
		if r.kind == "botctl" && r.nodes == 3 && r.rate == 500 {
			count[r.answer]++
			if n := count[r.answer]; n > count[best] || n == count[best] && r.answer > best {
				best = r.answer
			}
		}
	}
	return best
}
