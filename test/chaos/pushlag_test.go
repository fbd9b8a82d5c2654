package main

import (
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/wecomsim"
)

// A frame is timed from the latest write of its text before it was
// shown: a task's second attempt writes the texts its first attempt wrote
// (the demo answers a question with the same text), and its frames must
// not count the time since the first attempt's writes.
func TestLagsTimeFramesFromTheLatestWriteBeforeThem(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 5, 0, 0, 0, time.UTC)
	o := &outputWatch{at: map[string][]time.Time{
		"aa": {t0, t0.Add(80 * time.Second)}, // attempt 1, then attempt 2
		"bb": {t0.Add(10 * time.Second)},
	}}
	ev := []wecomsim.RecordedEvent{
		{Kind: wecomsim.RecordFrame, ContentHash: "aa", At: t0.Add(500 * time.Millisecond)}, // attempt 1's frame
		{Kind: wecomsim.RecordFrame, ContentHash: "aa", At: t0.Add(81 * time.Second)},       // attempt 2's frame
		{Kind: wecomsim.RecordFrame, ContentHash: "bb", At: t0.Add(9 * time.Second)},        // clock a little ahead: lag 0
		{Kind: wecomsim.RecordFrame, ContentHash: "cc", At: t0.Add(9 * time.Second)},        // a receipt: no write
		{Kind: wecomsim.RecordCallback, ContentHash: "aa", At: t0.Add(90 * time.Second)},    // not a frame
	}
	all, inFault, worst := o.lags(ev, t0, t0.Add(60*time.Second), t0.Add(120*time.Second))
	want := []time.Duration{500 * time.Millisecond, time.Second, 0}
	if len(all) != len(want) {
		t.Fatalf("lags %v, want %v", all, want)
	}
	for i := range want {
		if all[i] != want[i] {
			t.Errorf("lag %d = %v, want %v", i, all[i], want[i])
		}
	}
	if len(inFault) != 1 || inFault[0] != time.Second {
		t.Errorf("lags of output written after the fault settled: %v, want [1s]", inFault)
	}
	if worst == "" {
		t.Error("no slowest frame named")
	}
}
