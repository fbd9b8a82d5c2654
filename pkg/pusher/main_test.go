package pusher_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/botctl/botctl/internal/testenv"
	"go.uber.org/goleak"
)

// Every goroutine a test starts (workers, watches, servers) must have
// ended. Each test starts a JetStream server and a simulator of its own
// (a rig) and mostly waits on scan intervals, paces and acks: four run at
// once (testenv.Parallel). The tests that set a package variable
// (SetFlushWait, SetUnknownRecordFor) do not call t.Parallel: they run
// alone, before the others.
func TestMain(m *testing.M) {
	if err := testenv.Parallel(4); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m)
}
