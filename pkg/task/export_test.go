package task

// Create and Update are the lifecycle's primitives, exported to the tests.
var (
	Create = create
	Update = update
	// RecordFeedback is Lifecycle.Feedback on a given task bucket.
	RecordFeedback = feedback
)

// SetOpenWaitTries sets how many reads a queue task's Start gives the
// leader's Open, until the test ends.
func SetOpenWaitTries(t interface{ Cleanup(func()) }, n int) {
	old := openWaitTries
	openWaitTries = n
	t.Cleanup(func() { openWaitTries = old })
}
