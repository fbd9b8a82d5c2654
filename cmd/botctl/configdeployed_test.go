package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
)

// config check --nats compares the file's data-plane options with the
// deployed ones: each difference is an error naming its key (a node
// started with the file would keep the deployed value); a file that
// matches passes.
func TestConfigCheckComparesDeployedDataPlane(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{MediaTTL: 2 * time.Hour})
	url := env.Server.ClientURL()

	p := write(t, fmt.Sprintf("nats:\n  url: %s\n  replicas: 3\n", url))
	_, stderr, code := runBotctl(t, "config", "check", "--nats", p)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, stderr)
	}
	for _, want := range []string{"config key nats.replicas: BOTCTL_TASKS: replicas is 1 deployed", "config key nats.replicas: KV_BOTCTL_TASKS:",
		"config key media.ttl: OBJ_BOTCTL_MEDIA: max-age is 2h0m0s deployed, this node's media.ttl asks 24h0m0s"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}

	p = write(t, fmt.Sprintf("nats:\n  url: %s\nmedia:\n  ttl: 2h\n  max_store_bytes: 1073741824\n", url))
	_, stderr, code = runBotctl(t, "config", "check", "--nats", p)
	if want := "config key media.max_store_bytes: OBJ_BOTCTL_MEDIA: max-bytes is 4294967296 deployed, this node's media.max_store_bytes asks 1073741824"; code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("another media bound: exit %d, stderr lacks %q:\n%s", code, want, stderr)
	}

	p = write(t, fmt.Sprintf("nats:\n  url: %s\nmedia:\n  ttl: 2h\n", url))
	out, stderr, code := runBotctl(t, "config", "check", "--nats", p)
	if code != 0 || !strings.Contains(out, "match nats.replicas, media.ttl, media.max_store_bytes and media.reserve_bytes") {
		t.Fatalf("a file matching the deployment: exit %d\n%s%s", code, out, stderr)
	}
	if _, _, code := runBotctl(t, "config", "check", write(t, fmt.Sprintf("nats:\n  url: %s\n  replicas: 3\n", url))); code != 0 {
		t.Fatalf("without --nats NATS was asked: exit %d", code)
	}
}
