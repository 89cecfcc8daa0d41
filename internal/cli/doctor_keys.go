package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/once-run/once/store"
)

// Bounds of doctor's read of business keys: the first doctorScopes scopes, each counted up to
// doctorScopeKeys keys (store.CountScope), so that it costs at most 50,000 keys whatever the
// store holds; no index by state exists to read unknown keys alone.
const (
	doctorScopes    = 50
	doctorScopeKeys = 1000
)

// doctorKeysFile is where the keys command reads the keys that happened, one a line, when doctor
// could not name them all: until the person writes it, the shell refuses the command.
const doctorKeysFile = "happened.txt"

// internalScopes is the prefix of the scopes once daemon keeps its fleet-wide state in
// (scheduler.PauseScope, its recorded and output scopes): not a person's business keys.
const internalScopes = "once.scheduler."

// checkKeys reports the business keys left unknown (a run or an effect that claimed them two-phase
// died mid-work: nobody knows whether their work happened), which otherwise show only when they are
// claimed again: one finding per scope holding some, naming the first, with the command that marks
// those that happened done: all of them when all are named, else the keys of a file the person
// writes (doctorKeysFile), so that the command pasted as printed fails in the shell and records
// nothing (a placeholder key would be claimed done as it is).
func (a *app) checkKeys(ctx context.Context, s store.Store, dsn string, r *report) {
	if _, ok := s.(store.Keys); !ok {
		return // no business keys: none can be unknown
	}
	sl, ok := s.(store.ScopeLister)
	if !ok {
		r.add("keys", store.LevelInfo, "", "this store cannot list its business keys: an unknown key shows when it is claimed again")
		return
	}
	var scopes []string
	more := false
	for cursor := ""; ; {
		page, next, err := sl.Scopes(ctx, cursor, doctorScopes-len(scopes))
		if errors.Is(err, store.ErrUnsupported) {
			r.add("keys", store.LevelInfo, "", "this store cannot list its business keys (%v): an unknown key shows when it is claimed again", err)
			return
		}
		if err != nil {
			r.add("keys", store.LevelWarn, "", "cannot list the scopes of business keys: %v", err)
			return
		}
		scopes = append(scopes, page...)
		if next == "" {
			break
		}
		if len(scopes) >= doctorScopes {
			more = true
			break
		}
		cursor = next
	}
	found := 0
	for _, sc := range scopes {
		if strings.HasPrefix(sc, internalScopes) {
			// once daemon's own claims (docs/daemon.md#what-it-keeps-in-the-store): a late launch's
			// claim reads unknown once its run ended, by design, and marking it done would hide a
			// slot that a launch that died left unrun from the node that records it missed.
			continue
		}
		c, err := store.CountScope(ctx, sl, sc, doctorScopeKeys)
		if err != nil {
			r.add("keys", store.LevelWarn, "", "scope %s: cannot count its keys: %v", sc, err)
			continue
		}
		if c.Unknown == 0 {
			continue
		}
		found++
		count, keys, from := fmt.Sprint(c.Unknown), "", " < "+doctorKeysFile
		act := "write those that happened in " + doctorKeysFile + ", one a line, and mark them done"
		if c.Capped {
			count = fmt.Sprintf("%d of its first %d", c.Unknown, doctorScopeKeys)
		}
		q := make([]string, len(c.UnknownKeys))
		for i, k := range c.UnknownKeys {
			q[i] = shellQuote(k)
		}
		named := strings.Join(q, " ")
		if len(c.UnknownKeys) < c.Unknown || c.Capped {
			named = "the first: " + named
		} else {
			keys, from, act = " "+named, "", "mark those that happened done"
		}
		r.add("keys", store.LevelWarn, "", "scope %s: %s keys unknown (%s): the run or effect that claimed them is gone without marking them done (it died mid-work, or ended without once keys done), so nobody knows whether their work happened; check downstream, then %s (the next run's once keys claim --pending --reclaim-unknown hands out the others; once serve lists them all on /keys). In an idemhttp scope do neither: the client's retry takes the request over, and once keys forget --scope %s --older-than 24h --include-done clears those never retried (and the done ones of that age):",
			sc, count, named, act, shellQuote(sc))
		// The keys after --: a key such as -17 or --help is a key, not a flag of the pasted command.
		r.Findings[len(r.Findings)-1].Command = "once keys claim --scope " + shellQuote(sc) + " --reclaim-unknown" + a.storeArg(dsn) + " --" + keys + from
	}
	switch {
	case more:
		r.add("keys", store.LevelInfo, "", "read the first %d scopes of business keys (each up to %d keys); once serve's /keys lists every scope's unknown keys", doctorScopes, doctorScopeKeys)
	case len(scopes) == 0:
		r.add("keys", store.LevelOK, "", "no business key has been claimed")
	case found == 0:
		r.add("keys", store.LevelOK, "", "no business key is unknown in %d scopes (each read up to %d keys)", len(scopes), doctorScopeKeys)
	}
}
