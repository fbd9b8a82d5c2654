package main

import (
	"strings"
	"testing"
)

func TestInfraRefusesABadSyncInterval(t *testing.T) {
	for _, v := range []string{"sometimes", "0s", "-1m"} {
		_, err := run(t, "infra", "--data-dir", t.TempDir(), "--nats-sync", v)
		if err == nil || !strings.Contains(err.Error(), "--nats-sync") || !strings.Contains(err.Error(), `"always"`) {
			t.Errorf("--nats-sync %s: %v, want an error naming the flag and its values", v, err)
		}
	}
}
