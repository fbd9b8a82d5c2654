// Package testwait is how tests wait for something to happen: they poll
// a condition until it holds or a generous deadline passes, instead of
// sleeping for a guessed time. Deadlines are generous because the tests
// must not be flaky on a loaded 2-core machine; a condition that holds
// returns at once, so a generous deadline costs nothing when things work.
package testwait

import (
	"testing"
	"time"
)

// Every is how often a condition is polled.
const Every = 20 * time.Millisecond

// Eventually polls cond every Every until it returns true, and fails t
// ("timed out waiting for <what>") once timeout has passed without it.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(Every)
	}
}

// NoError polls cond every every until it returns nil, and fails t with
// cond's last error once timeout has passed without it.
func NoError(t testing.TB, timeout, every time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %v: %v", what, timeout, err)
		}
		time.Sleep(every)
	}
}
