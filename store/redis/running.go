package redis

import (
	"context"
	"errors"

	goredis "github.com/redis/go-redis/v9"

	"github.com/once-run/once/internal/kvstore"
)

var _ kvstore.AllRunningKV = kv{}

// AllRunning reads every task's running index, as Waiting reads the waiting indexes: a pipelined
// round trip for the set of tasks, one for each task's mark and running set, one for the documents
// they list. It costs the tasks and the slots running, not the ledger. A task granted a lease (its
// fence hash's counter n above 0) without the mark (the field r) has an index an older once never
// built.
func (k kv) AllRunning(ctx context.Context) ([]*kvstore.Doc, []string, error) {
	s := k.s
	p := s.c.Pipeline()
	ep := p.Get(ctx, s.key("epoch"))
	tc := p.SMembers(ctx, s.key("tasks"))
	_, _ = p.Exec(ctx)
	if err := s.epochOK(ep); err != nil {
		return nil, nil, err
	}
	tasks, err := tc.Result()
	if err != nil {
		return nil, nil, s.mapErr(err)
	}
	p = s.c.Pipeline()
	marks := make([]*goredis.SliceCmd, len(tasks))
	sets := make([]*goredis.StringSliceCmd, len(tasks))
	for i, t := range tasks {
		marks[i] = p.HMGet(ctx, s.tkey(t, "fence"), "r", "n")
		sets[i] = p.SMembers(ctx, s.tkey(t, "running"))
	}
	if len(tasks) > 0 {
		_, _ = p.Exec(ctx)
	}
	var unindexed []string
	p = s.c.Pipeline()
	var cmds []*goredis.StringCmd
	for i, t := range tasks {
		m, err := marks[i].Result()
		if err != nil {
			return nil, nil, s.mapErr(err)
		}
		if m[0] == nil {
			// No mark. A task the set knows from an event alone (a missed slot of a job that never
			// ran: the event's write makes the fence hash with counter 0) was never granted a
			// lease, so it has no attempt; one that was granted has an index never built.
			if n, _ := m[1].(string); n != "" && n != "0" {
				unindexed = append(unindexed, t)
			}
			continue
		}
		slots, err := sets[i].Result()
		if err != nil {
			return nil, nil, s.mapErr(err)
		}
		for _, sl := range slots {
			cmds = append(cmds, p.HGet(ctx, s.tkey(t, "d:"+sl), "d"))
		}
	}
	if len(cmds) == 0 {
		return nil, unindexed, nil
	}
	_, _ = p.Exec(ctx)
	var out []*kvstore.Doc
	for _, c := range cmds {
		b, err := c.Bytes()
		if errors.Is(err, goredis.Nil) {
			continue // listed, but gone: the task's next Abandon takes the entry out
		}
		if err != nil {
			return nil, nil, s.mapErr(err)
		}
		d, err := kvstore.Unmarshal(b)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, d)
	}
	return out, unindexed, nil
}
