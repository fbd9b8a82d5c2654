package pusher_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts (workers, watches, servers) must have ended.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
