package pipeline

import (
	"testing"

	"go.uber.org/goleak"
)

// A whole node in process: every goroutine must end with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
