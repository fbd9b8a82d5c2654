package ai

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/botctl/botctl/pkg/config"
)

// New builds exactly the kinds pkg/config validates, in its order: a kind
// configured but not built (or built but never accepted) is caught here,
// not on a node.
func TestKindsAreConfigKinds(t *testing.T) {
	var names []string
	for _, k := range kinds {
		if k.build == nil {
			t.Errorf("kind %s has no builder", k.name)
		}
		names = append(names, k.name)
	}
	if want := config.AIKinds(); !slices.Equal(names, want) {
		t.Errorf("kinds.go builds %q; pkg/config's kinds are %q", names, want)
	}
}

// The tables of ai.kind in the docs name every kind.
func TestKindsInTheDocs(t *testing.T) {
	for _, doc := range []string{"../../docs/ai.md", "../../docs/operations.md"} {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		var row string
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "| `ai.kind` |") {
				row = line
			}
		}
		if row == "" {
			t.Errorf("%s has no row of ai.kind", doc)
			continue
		}
		for _, k := range kinds {
			if !strings.Contains(row, "`"+k.name+"`") {
				t.Errorf("%s: the row of ai.kind does not name `%s`", doc, k.name)
			}
		}
	}
}
