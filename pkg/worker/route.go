package worker

import (
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/task"
)

// backendSteps are the AI backends a run asked (the chain's Route), for
// the task's record.
func backendSteps(route *ai.Route) []task.BackendStep {
	var out []task.BackendStep
	for _, s := range route.Steps() {
		out = append(out, task.BackendStep{Backend: s.Backend, Outcome: s.Outcome, Reason: s.Reason})
	}
	return out
}
