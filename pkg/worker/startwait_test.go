package worker_test

import (
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/worker"
)

// While the tasks bucket does not answer, a worker that cannot start a
// task (its record unwritable) spends none of the queue's deliveries on
// it: it tries the start again, patiently, and answers once the bucket is
// back. Found by the chaos suite's churn-tasks-bucket: every delivery was
// spent in ten seconds of a one-minute fault and the user got a failure
// notice. Fails on the old code (the queue's two deliveries here are
// spent and the task given up).
func TestStartWaitsOutAFailingTasksBucket(t *testing.T) {
	t.Parallel()
	fault := testenv.StartBucketFault(t)
	opts := jetstream.Options{TaskMaxDeliver: 2}
	_, botctl := fault.Store(t, fault.URL, opts)
	_, probe := fault.Store(t, fault.ProbeURL, opts)
	fault.Fail(t, probe.Names().TasksBucket)
	runWith(t, worker.Config{NodeID: "w1", Backend: demo(t, 10*time.Millisecond), Store: botctl})
	m := publish(t, probe, "m1", "alice", "q")
	time.Sleep(15 * time.Second) // longer than both deliveries' record writes take to time out
	fault.Heal(t)
	testwait.Eventually(t, time.Minute, "the task answered once the tasks bucket is back", func() bool {
		return record(t, probe, m.TaskID).Exec == task.Succeeded
	})
	if r := record(t, probe, m.TaskID); r.Deliveries != 1 {
		t.Fatalf("answered on delivery %d, want 1: the failing bucket spent deliveries", r.Deliveries)
	}
}
