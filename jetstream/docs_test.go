package jetstream

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// docs/jetstream.md's table names every stream, bucket, object store and
// core NATS subject the data plane declares, as `NAME`: a name added to
// Names without its row fails here.
func TestDocsNameEveryStreamBucketAndSubject(t *testing.T) {
	raw, err := os.ReadFile("../docs/jetstream.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	n := NamesFor("")
	v := reflect.ValueOf(n)
	for i := range v.NumField() {
		field, name := v.Type().Field(i).Name, v.Field(i).String()
		if name == "" {
			t.Fatalf("NamesFor(\"\").%s is empty", field)
		}
		if strings.HasSuffix(field, "SubjectPrefix") {
			name += "."
		}
		if !strings.Contains(doc, "`"+name) {
			t.Errorf("docs/jetstream.md does not name %s (%s)", name, field)
		}
	}
}
