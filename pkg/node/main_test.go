package node_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts must have ended; the embedded etcd's own
// are gone once each test's cleanup has closed it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
