package zk

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"

	"github.com/once-run/once/internal/kvstore"
)

// The running index (kvstore.RunningKV): a node /once/P/a/TASK/SLOT for each slot whose document has
// a running attempt, kept by Save's multi as the waiting index is (save). The task's directory,
// /once/P/a/TASK, says its index was built: made by the task's first acquire (nothing can run
// before it), or by the first Abandon of a task an older once ran. Abandon lists it instead of the
// task's documents.

var _ kvstore.RunningKV = kv{}

func (s *Store) runningDir(task string) string        { return s.p + "/a/" + esc(task) }
func (s *Store) runningPath(task, slot string) string { return s.runningDir(task) + "/" + esc(slot) }

// markRunning makes task's running directory: the task's index is built.
func (s *Store) markRunning(ctx context.Context, task string) error {
	mk := func(p string) error {
		_, err := call(ctx, s, func() (string, error) { return s.c.Create(p, nil, 0, s.acl) })
		if errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		return err
	}
	err := mk(s.runningDir(task))
	if errors.Is(err, zk.ErrNoNode) { // /once/P/a itself is missing (a prefix an older once made)
		if err = mk(s.p + "/a"); err == nil {
			err = mk(s.runningDir(task))
		}
	}
	return s.mapErr(err)
}

// Running lists task's running directory and reads the documents it names; no directory: not built.
func (k kv) Running(ctx context.Context, task string) ([]*kvstore.Doc, bool, error) {
	s := k.s
	kids, err := call(ctx, s, func() ([]string, error) { k, _, err := s.c.Children(s.runningDir(task)); return k, err })
	if errors.Is(err, zk.ErrNoNode) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, s.mapErr(err)
	}
	var out []*kvstore.Doc
	for _, name := range kids {
		slot := unesc(name)
		b, err := call(ctx, s, func() ([]byte, error) { b, _, err := s.c.Get(s.docPath(task, slot)); return b, err })
		if errors.Is(err, zk.ErrNoNode) {
			// Listed, but gone (an older once's prune): an empty document takes the entry out.
			out = append(out, &kvstore.Doc{Task: task, Slot: slot})
			continue
		}
		if err != nil {
			return nil, false, s.mapErr(err)
		}
		d, err := kvstore.Unmarshal(b)
		if err != nil {
			return nil, false, err
		}
		out = append(out, d)
	}
	return out, true, nil
}

// IndexRunning makes task's running directory and the nodes of docs with a running attempt.
func (k kv) IndexRunning(ctx context.Context, task string, docs []*kvstore.Doc) error {
	s := k.s
	if err := s.markRunning(ctx, task); err != nil {
		return err
	}
	for _, d := range docs {
		if d.Runs() {
			if err := s.ensure(ctx, s.runningPath(d.Task, d.Slot)); err != nil {
				return err
			}
		}
	}
	return nil
}

var _ kvstore.AllRunningKV = kv{}

// childrenOrNone lists the children of p, none when p does not exist.
func (s *Store) childrenOrNone(ctx context.Context, p string) ([]string, error) {
	kids, err := call(ctx, s, func() ([]string, error) { k, _, err := s.c.Children(p); return k, err })
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	return kids, s.mapErr(err)
}

// AllRunning reads every task's running index: the children of /once/P/locks (every task granted
// a lease) and of /once/P/a (the tasks whose index was built), then each built task's directory
// and the documents it lists, in parallel reads (go-zookeeper pipelines them on its one session).
// It costs the tasks and the slots running, not the ledger.
func (k kv) AllRunning(ctx context.Context) ([]*kvstore.Doc, []string, error) {
	s := k.s
	tasks, err := s.childrenOrNone(ctx, s.p+"/locks")
	if err != nil {
		return nil, nil, err
	}
	built, err := s.childrenOrNone(ctx, s.p+"/a")
	if err != nil {
		return nil, nil, err
	}
	marked := make(map[string]bool, len(built))
	for _, t := range built {
		marked[t] = true
	}
	var unindexed []string
	for _, t := range tasks {
		if !marked[t] {
			unindexed = append(unindexed, unesc(t))
		}
	}
	slots := make([][]string, len(built))
	if err := each(ctx, len(built), func(i int) (err error) {
		slots[i], err = s.childrenOrNone(ctx, s.p+"/a/"+built[i])
		return err
	}); err != nil {
		return nil, nil, err
	}
	var paths []string
	for i, t := range built {
		for _, sl := range slots[i] {
			paths = append(paths, s.docPath(unesc(t), unesc(sl)))
		}
	}
	docs := make([]*kvstore.Doc, len(paths))
	err = each(ctx, len(paths), func(i int) error {
		b, err := call(ctx, s, func() ([]byte, error) { b, _, err := s.c.Get(paths[i]); return b, err })
		if errors.Is(err, zk.ErrNoNode) {
			return nil // listed, but gone: the task's next Abandon takes the entry out
		}
		if err != nil {
			return s.mapErr(err)
		}
		docs[i], err = kvstore.Unmarshal(b)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	var out []*kvstore.Doc
	for _, d := range docs {
		if d != nil {
			out = append(out, d)
		}
	}
	return out, unindexed, nil
}
