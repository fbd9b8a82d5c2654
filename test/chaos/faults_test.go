package main

import (
	"encoding/json"
	"testing"
)

// A corrupt record met while the bot's data incident from an earlier one
// is still open is named in that incident's timeline, not its reason: the
// scenario's check finds it there (it read only the reason, and failed
// rounds 2 and 3 of a three-round run with botctl doing as designed).
func TestIncidentRowNamesTimeline(t *testing.T) {
	var row incidentRow
	if err := json.Unmarshal([]byte(`{"id":"i1","signal":"corrupt_record","reason":"the record of task t_first does not decode",
		"events":[{"what":"detected"},{"what":"task record does not decode, skipped (rebuild): task t_second: bad"}]}`), &row); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t_first", "t_second"} {
		if !row.names(id) {
			t.Errorf("%s not found in %+v", id, row)
		}
	}
	if row.names("t_third") {
		t.Error("t_third found")
	}
}
