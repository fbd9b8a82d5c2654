package worker

import (
	natsjs "github.com/nats-io/nats.go/jetstream"
	"time"
)

// SetCancelCheck sets how often a running task's record is re-read
// (cancelCheck) until the test ends.
func SetCancelCheck(t interface{ Cleanup(func()) }, d time.Duration) {
	old := cancelCheck
	cancelCheck = d
	t.Cleanup(func() { cancelCheck = old })
}

// HandBack hands msg back as Run does with a message delivered after the
// stop began.
func HandBack(w *Worker, msg natsjs.Msg) { w.handBack(msg) }
