package serve

import (
	"fmt"
	"os"
	"testing"

	"github.com/botctl/botctl/internal/testenv"
)

// Every test starts servers of its own (etcd and NATS on free ports, the
// simulator on httptest, data in t.TempDir) and reads only its own nodes'
// state, so all but the five that set an environment variable call
// t.Parallel. They spend most of their time waiting on time windows
// (answers, quotas, TTLs), not on the CPU: four run at once.
func TestMain(m *testing.M) {
	if err := testenv.Parallel(4); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}
