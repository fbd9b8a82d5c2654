package worker

import "time"

// SetCancelCheck sets how often a running task's record is re-read
// (cancelCheck) until the test ends.
func SetCancelCheck(t interface{ Cleanup(func()) }, d time.Duration) {
	old := cancelCheck
	cancelCheck = d
	t.Cleanup(func() { cancelCheck = old })
}
