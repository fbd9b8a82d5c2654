package pipeline

import (
	"fmt"
	"os"
	"testing"

	"github.com/botctl/botctl/internal/testenv"
	"go.uber.org/goleak"
)

// A whole node in process: every goroutine must end with it.
//
// Every test starts a cluster of its own (etcd and NATS on ports from
// infra.FreeAddr(s), the simulator on httptest, data in t.TempDir) and
// reads only its own nodes' state (the one process-wide counter,
// alerts_sent, is checked as at least one), so all call t.Parallel but
// TestMediaReachesTheAnswer (it sets TMPDIR), which runs alone first.
// They spend most of their time waiting on time windows (answers,
// quotas, TTLs), not on the CPU: four run at once (testenv.Parallel;
// six, beside test/e2e's and pkg/serve's, held the load average of two
// cores at 13 and made the run slower).
func TestMain(m *testing.M) {
	if err := testenv.Parallel(4); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m)
}
