package serve

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// Every line a node logs carries its node field once, and a bot's lines
// their bot field once: each component added them again to a logger that
// had them already (an election line carried node three times).
func TestLogLinesCarryNodeAndBotOnce(t *testing.T) {
	t.Parallel()
	e, ns := startEtcd(t), startNATS(t)
	var mu sync.Mutex
	var lines []string
	log := zerolog.New(lineWriter(func(l string) { mu.Lock(); lines = append(lines, l); mu.Unlock() })).Level(zerolog.DebugLevel)
	if _, err := startNodeLogged(t, nodeConfig(t, startSim(t), e, ns.ClientURL()), log); err != nil {
		t.Fatal(err)
	}
	// Wait for a line from the bot's term (the node wins its election).
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		var bot bool
		for _, l := range lines {
			bot = bot || strings.Contains(l, `"bot":`)
		}
		n := len(lines)
		mu.Unlock()
		if bot {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s, %d lines, none of the bot's", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, l := range lines {
		for _, field := range []string{`"node":`, `"bot":`, `"component":`} {
			if c := strings.Count(l, field); c > 1 {
				t.Errorf("%s %d times: %s", field, c, strings.TrimSpace(l))
			}
		}
	}
	t.Logf("%d lines checked:\n%s", len(lines), strings.Join(lines, ""))
}
