package natscount_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The embedded servers and BucketFault's proxy: every goroutine ends with
// the test that started it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
