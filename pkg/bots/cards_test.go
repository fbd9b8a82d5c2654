package bots

import (
	"testing"

	"github.com/botctl/botctl/pkg/ai"
)

// chained is a backend that chains others (as a fallback chain does).
type chained struct {
	ai.Backend
	links []ai.Backend
}

func (c chained) Backends() []ai.Backend { return c.links }

// A click reaches the backend that answers cards, also behind a chain.
func TestCardResponderBehindAChain(t *testing.T) {
	demo, err := ai.New(ai.Config{Kind: ai.KindDemo})
	if err != nil {
		t.Fatal(err)
	}
	if cardResponder(demo) == nil {
		t.Fatal("the demo backend answers cards")
	}
	if cardResponder(chained{Backend: demo, links: []ai.Backend{chained{links: nil}, demo}}) == nil {
		t.Fatal("the chain's demo link not found")
	}
	if cardResponder(chained{links: nil}) != nil {
		t.Fatal("a chain of nothing answers cards")
	}
}
