package natscount_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The embedded server and each Counter's goroutine end with the test
// that started them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
