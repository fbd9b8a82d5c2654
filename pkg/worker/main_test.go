package worker_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/botctl/botctl/internal/testenv"
	"go.uber.org/goleak"
)

// Every goroutine a test starts (workers, watches, servers) must have
// ended. Each test starts a JetStream server of its own and mostly waits
// on answers and ack waits: four run at once (testenv.Parallel). A test
// that sets a package variable (SetCancelCheck) does not call
// t.Parallel: it runs alone, before the others.
func TestMain(m *testing.M) {
	if err := testenv.Parallel(4); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m)
}
