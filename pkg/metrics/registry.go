package metrics

import (
	"regexp"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Registry is a Prometheus registry that also knows the name of every
// metric its collectors describe, including families with no series yet
// (a counter vector nobody has counted): what the node can expose, for
// the checks that dashboards and alert rules ask only for real metrics.
type Registry struct {
	*prometheus.Registry

	mu    sync.Mutex
	names map[string]bool
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{Registry: prometheus.NewRegistry(), names: map[string]bool{}}
}

// Register registers c and remembers the names it describes.
func (r *Registry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range ch {
		// A Desc shows its name only in its String form:
		// Desc{fqName: "botctl_…", help: …}.
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return nil
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// MustRegister registers each collector and panics on an error, as
// prometheus.Registry's does.
func (r *Registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Names lists, sorted, every metric name the registered collectors
// describe.
func (r *Registry) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.names))
	for n := range r.names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
