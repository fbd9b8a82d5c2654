package access

import (
	"container/list"
	"encoding/json"
	"sync"

	"github.com/botctl/botctl/pkg/task"
)

// lru remembers the most recent keys, bounded.
type lru struct {
	mu    sync.Mutex
	max   int
	order *list.List
	keys  map[string]*list.Element
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
	}
	return true
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
