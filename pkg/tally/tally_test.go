package tally

import (
	"sync"
	"testing"
)

func TestAddGetAndDrop(t *testing.T) {
	var c Tally
	if c.Get("a") != 0 {
		t.Fatal("zero value: want 0")
	}
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() { c.Add("a", 1) })
	}
	wg.Wait()
	if got := c.Get("a"); got != 100 {
		t.Fatalf("a = %d, want 100", got)
	}
	c.Add("a", -101)
	if got, n := c.Get("a"), len(c.n); got != 0 || n != 0 {
		t.Fatalf("after going below zero: a = %d, %d keys kept; want 0 and none", got, n)
	}
}
