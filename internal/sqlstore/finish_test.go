package sqlstore

import (
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// A retried FinishReleaseMySQL takes the attempt it reads back for its own earlier, committed
// write only when that attempt is the run's, under its token, ended in the outcome it asked for.
func TestCommittedBefore(t *testing.T) {
	ended := time.Now()
	mine := store.Attempt{RunID: "r", Token: 7, State: store.Succeeded, EndedAt: &ended}
	if !committedBefore(mine, "r", 7, store.Succeeded) {
		t.Fatal("the run's own outcome not recognised")
	}
	for name, a := range map[string]store.Attempt{
		"still running":   {RunID: "r", Token: 7, State: store.Running},
		"abandoned":       {RunID: "r", Token: 7, State: store.Unknown, EndedAt: &ended},
		"another outcome": {RunID: "r", Token: 7, State: store.Failed, EndedAt: &ended},
		"another token":   {RunID: "r", Token: 8, State: store.Succeeded, EndedAt: &ended},
		"another run":     {RunID: "q", Token: 7, State: store.Succeeded, EndedAt: &ended},
		"no attempt read": {},
	} {
		if committedBefore(a, "r", 7, store.Succeeded) {
			t.Errorf("%s: taken for the run's own committed outcome", name)
		}
	}
}
