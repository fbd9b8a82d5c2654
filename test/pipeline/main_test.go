package pipeline

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

// parallelTests is how many of the package's tests run at once unless
// -test.parallel is given. Every test starts a cluster of its own (etcd
// and NATS on ports from infra.FreeAddr(s), the simulator on httptest,
// data in t.TempDir) and reads only its own nodes' state (the one
// process-wide counter, alerts_sent, is checked as at least one), so all
// call t.Parallel but TestMediaReachesTheAnswer (it sets TMPDIR), which
// runs alone first. They spend most of their time waiting on time windows
// (answers, quotas, TTLs), not on the CPU, so more run at once than the
// default GOMAXPROCS (2 on CI) would let; at 8, beside a CPU hog, runs
// failed.
const parallelTests = 4

// A whole node in process: every goroutine must end with it.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(parallelTests)); err != nil {
			fmt.Fprintf(os.Stderr, "set -test.parallel: %v\n", err)
			os.Exit(2)
		}
	}
	goleak.VerifyTestMain(m)
}
