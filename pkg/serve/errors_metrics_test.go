package serve

import (
	"bufio"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricValue is the value of the sample named exactly series (name and
// labels as the text format prints them) in a scrape, and whether it is
// there.
func metricValue(scrape, series string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(scrape))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if ok && name == series {
			v, err := strconv.ParseFloat(value, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// sumMetric sums every sample of the metric name (any labels) except
// those whose labels contain skip ("": none skipped).
func sumMetric(scrape, name, skip string) float64 {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(scrape))
	for sc.Scan() {
		series, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) || (skip != "" && strings.Contains(series, skip)) {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			sum += v
		}
	}
	return sum
}

// waitMetric scrapes the node until cond holds for the scrape, or fails
// after within.
func waitMetric(t *testing.T, rn *runningNode, within time.Duration, what string, cond func(scrape string) bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		if last = rn.scrape(t); cond(last) {
			t.Logf("%s; error counters:\n%s", what, errorCounters(last))
			return
		}
		time.Sleep(200 * time.Millisecond) // polling interval, not an assertion
	}
	t.Fatalf("after %s, still not %s; error counters:\n%s", within, what, errorCounters(last))
}

func errorCounters(scrape string) string {
	var lines []string
	for _, l := range strings.Split(scrape, "\n") {
		if strings.HasPrefix(l, "botctl_") && strings.Contains(l, "_errors_total") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// The NATS server going away under a running node is counted on the
// node's /metrics: botctl_nats_errors_total{kind="disconnect"} rises.
func TestNATSDisconnectCounted(t *testing.T) {
	t.Parallel()
	e := startEtcd(t)
	ns := startNATS(t)
	rn, err := startNode(t, nodeConfig(t, startSim(t), e, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	const series = `botctl_nats_errors_total{kind="disconnect",op=""}`
	before, _ := metricValue(rn.scrape(t), series)
	ns.Close()
	waitMetric(t, rn, 60*time.Second, series+" above "+strconv.FormatFloat(before, 'f', -1, 64), func(s string) bool {
		v, ok := metricValue(s, series)
		return ok && v > before
	})
}

// etcd going away under a running node is counted on the node's /metrics
// by its own loops (election, registry), without anyone asking /readyz:
// botctl_etcd_errors_total rises for an op other than probe.
func TestEtcdFailureCounted(t *testing.T) {
	t.Parallel()
	e := startEtcd(t)
	ns := startNATS(t)
	rn, err := startNode(t, nodeConfig(t, startSim(t), e, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	before := sumMetric(rn.scrape(t), "botctl_etcd_errors_total", `op="probe"`)
	e.Close()
	waitMetric(t, rn, 90*time.Second, "botctl_etcd_errors_total (op other than probe) risen", func(s string) bool {
		return sumMetric(s, "botctl_etcd_errors_total", `op="probe"`) > before
	})
}
