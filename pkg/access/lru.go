package access

import (
	"container/list"
	"encoding/json"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/task"
)

// lru remembers the most recent keys, bounded.
type lru struct {
	mu    sync.Mutex
	max   int
	order *list.List
	keys  map[string]*list.Element
	// evicted is when a key was last dropped for room (zero: never).
	evicted time.Time
}

func newLRU(max int) *lru {
	return &lru{max: max, order: list.New(), keys: make(map[string]*list.Element, max)}
}

// add records key and reports whether it was new.
func (l *lru) add(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.keys[key]; ok {
		l.order.MoveToFront(e)
		return false
	}
	l.keys[key] = l.order.PushFront(key)
	if l.order.Len() > l.max {
		old := l.order.Back()
		l.order.Remove(old)
		delete(l.keys, old.Value.(string))
		l.evicted = time.Now()
	}
	return true
}

// remove forgets key.
func (l *lru) remove(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.keys[key]; ok {
		l.order.Remove(e)
		delete(l.keys, key)
	}
}

// evictedAt is when a key was last dropped for room (zero: never): what
// was added before may be forgotten.
func (l *lru) evictedAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.evicted
}

// has reports whether key is remembered.
func (l *lru) has(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.keys[key]
	return ok
}

func decodeMessage(raw []byte) (task.Message, error) {
	var m task.Message
	err := json.Unmarshal(raw, &m)
	return m, err
}
