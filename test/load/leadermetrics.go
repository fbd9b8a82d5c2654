package main

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// histogram is one Prometheus histogram as scraped: cumulative counts by
// upper bound.
type histogram struct {
	bounds []float64 // sorted, +Inf last
	counts []float64
}

// quantile is Prometheus's histogram_quantile: linear inside the bucket
// the rank falls in (the figure is as fine as the buckets, no finer).
func (h histogram) quantile(q float64) float64 {
	if len(h.counts) == 0 || h.counts[len(h.counts)-1] == 0 {
		return math.NaN()
	}
	rank := q * h.counts[len(h.counts)-1]
	lower, below := 0.0, 0.0
	for i, b := range h.bounds {
		if h.counts[i] >= rank {
			if math.IsInf(b, 1) {
				return lower // past the last bound: the last bound, as Prometheus does
			}
			in := h.counts[i] - below
			if in == 0 {
				return b
			}
			return lower + (b-lower)*(rank-below)/in
		}
		lower, below = b, h.counts[i]
	}
	return lower
}

// metricsLines fetches a node's /metrics and returns its lines.
func metricsLines(api string) ([]string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(api + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", api, resp.Status)
	}
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}

// scrapeHistograms reads the named histograms from a node's /metrics
// (every label set summed, but a stage label's values apart, as
// "name/stage").
func scrapeHistograms(api string, names ...string) (map[string]histogram, error) {
	lines, err := metricsLines(api)
	if err != nil {
		return nil, err
	}
	sums := map[string]map[float64]float64{}
	for _, n := range names {
		sums[n] = map[float64]float64{}
	}
	for _, line := range lines {
		name, rest, ok := strings.Cut(line, "_bucket{")
		if !ok || sums[name] == nil {
			continue
		}
		if _, st, ok := strings.Cut(rest, `stage="`); ok {
			st, _, _ = strings.Cut(st, `"`)
			name += "/" + st
			if sums[name] == nil {
				sums[name] = map[float64]float64{}
			}
		}
		_, le, ok := strings.Cut(rest, `le="`)
		if !ok {
			continue
		}
		bound, after, _ := strings.Cut(le, `"`)
		b, err := strconv.ParseFloat(bound, 64)
		if err != nil {
			continue
		}
		fields := strings.Fields(after)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		sums[name][b] += v
	}
	out := map[string]histogram{}
	for n, m := range sums {
		var h histogram
		for b := range m {
			h.bounds = append(h.bounds, b)
		}
		sort.Float64s(h.bounds)
		for _, b := range h.bounds {
			h.counts = append(h.counts, m[b])
		}
		out[n] = h
	}
	return out, nil
}

// scrapeCounters reads the samples of counter name from a node's
// /metrics as "labels value" lines (for the log: what the leader's
// pusher did).
func scrapeCounters(api, name string) (string, error) {
	lines, err := metricsLines(api)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, line := range lines {
		if rest, ok := strings.CutPrefix(line, name+"{"); ok {
			b.WriteString(rest)
			b.WriteString("; ")
		}
	}
	return b.String(), nil
}
