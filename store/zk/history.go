package zk

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

// The history index (kvstore.HistoryKV). ZooKeeper reads no range of children: getChildren returns
// them all. So each task's marks are nodes in buckets by time, three levels deep, named by their
// key's head: /once/P/x/TASK/L1/L2/L3/MARK, L1 the key's first 6 hex digits (2^40 µs, about 12.7
// days), L2 its first 8 (2^32 µs, about 72 minutes), L3 its first 11 (2^20 µs, about a second). A
// page lists the task's L1 buckets (a few dozen a year), the L2 buckets of one (at most 256), the L3
// buckets of one (at most 4,096) and the marks of as many L3 buckets as it needs (the first alone,
// then as many in parallel as the marks found so far say are needed: go-zookeeper pipelines them
// on its session): it costs the page and the buckets it passes, not the
// history, and no listing holds more than a second's marks of a task or 4,096 bucket names (a node's
// children come in one packet, at most jute.maxbuffer, 1 MiB). A document's write creates its marks
// and their L3 bucket in its multi (a bucket that exists fails the multi, which is sent again
// without it: two writes of one task in one second); a write into a new L2 bucket (once per 72
// minutes of a task) makes the buckets above first. A document's delete deletes the buckets its marks
// leave empty (Unmark); buckets a rewrite emptied are deleted by the page that finds them empty (a
// delete of a bucket that is not empty fails, and is left). A task's index of a kind
// (kvstore.KindPrefix) is a tree of the same buckets under /once/P/z/TASK/KIND, its marks named by
// their key after the prefix: an older once never reads it.

var _ kvstore.HistoryKV = kv{}

// markLevels are the lengths of the bucket names, outermost first.
var markLevels = [3]int{6, 8, 11}

func (s *Store) historyRoot() string           { return s.p + "/x" }
func (s *Store) historyDir(task string) string { return s.historyRoot() + "/" + esc(task) }
func (s *Store) kindRoot() string              { return s.p + "/z" }

// indexDir is the directory of task's index of kind ("": its marks).
func (s *Store) indexDir(task string, kind store.State) string {
	if kind == "" {
		return s.historyDir(task)
	}
	return s.kindRoot() + "/" + esc(task) + "/" + esc(string(kind))
}

// markDir is the L3 bucket of key (kvstore.Mark.Key) in task's indexes.
func (s *Store) markDir(task, key string) string {
	kind, m := kvstore.SplitKind(key)
	return s.indexDir(task, kind) + "/" + m[:markLevels[0]] + "/" + m[:markLevels[1]] + "/" + m[:markLevels[2]]
}

// markPath is key's node: named by the key after its kind's prefix.
func (s *Store) markPath(task, key string) string {
	_, m := kvstore.SplitKind(key)
	return s.markDir(task, key) + "/" + m
}

// pathKey is the key (kvstore.Mark.Key) of the node name of task's index at path, or of a bucket
// there: its kind's prefix when path is in an index of a kind.
func (s *Store) pathKey(task, path, name string) string {
	rest, ok := strings.CutPrefix(path, s.kindRoot()+"/"+esc(task)+"/")
	if !ok {
		return name
	}
	kind, _, _ := strings.Cut(rest, "/")
	return kvstore.KindPrefix(store.State(unesc(kind))) + name
}

// kindsIndexed marks the indexes of a kind as built (kvstore.HistoryKV.IndexKinds): kindsIndexed1
// those of missed only, which an earlier once built and reads.
func (s *Store) kindsIndexed() string  { return s.p + "/z2-indexed" }
func (s *Store) kindsIndexed1() string { return s.p + "/z-indexed" }

// historyIndexed marks the index as built (kvstore.HistoryKV.IndexHistory).
func (s *Store) historyIndexed() string { return s.p + "/x-indexed" }

// ensureMarkDirs creates the buckets of key in task's index, the L3 bucket with l3, outermost
// first. A delete that empties a task's index drops its buckets and directories innermost first
// (Unmark): a create whose parent it deleted meanwhile fails with ErrNoNode, and the chain is
// made again from the top.
func (s *Store) ensureMarkDirs(ctx context.Context, task, key string, l3 bool) error {
	kind, key := kvstore.SplitKind(key)
	dirs := []string{s.historyRoot(), s.historyDir(task)}
	if kind != "" {
		dirs = []string{s.kindRoot(), s.kindRoot() + "/" + esc(task), s.indexDir(task, kind)}
	}
	p := s.indexDir(task, kind)
	for i, n := range markLevels {
		if i == len(markLevels)-1 && !l3 {
			break
		}
		p += "/" + key[:n]
		dirs = append(dirs, p)
	}
	for try := 0; ; try++ {
		var err error
		for _, dir := range dirs {
			if _, err = call(ctx, s, func() (string, error) { return s.c.Create(dir, nil, 0, s.acl) }); errors.Is(err, zk.ErrNodeExists) {
				err = nil
			}
			if err != nil {
				break
			}
		}
		if err == nil || !errors.Is(err, zk.ErrNoNode) || try == 8 {
			return s.mapErr(err)
		}
	}
}

// makeMarkDirs makes the buckets above key's L3 bucket in task's index, in one multi when it can:
// the L2 bucket alone (a task's writes cross into a new one every 72 minutes), else with the L1
// bucket, else with the task's directory (and docDir, when not "": a task's first document, whose
// directory its write makes with them), else one at a time.
func (s *Store) makeMarkDirs(ctx context.Context, task, key, docDir string) error {
	kind, m := kvstore.SplitKind(key)
	l1 := s.indexDir(task, kind) + "/" + m[:markLevels[0]]
	l2 := l1 + "/" + m[:markLevels[1]]
	chains := [][]string{{l2}, {l1, l2}, {s.indexDir(task, kind), l1, l2}}
	if docDir != "" && kind == "" {
		chains = [][]string{{docDir, s.historyDir(task), l1, l2}}
	}
	if kind != "" && docDir == "" {
		// An index of a kind is sparse (a task's first busy event in 72 minutes, or its first
		// ever, the L1 bucket and the directories above it missing too): one multi checks the
		// directories above the L2 bucket and makes it; when one is missing, it fails there and
		// those from it on are made in a second multi. One round trip, or two, each one request
		// (no parallel calls: a count that does not depend on the server's pace).
		dirs, err := s.madeBelow(ctx, s.bucketChain(l2))
		if err != nil || len(dirs) == 0 {
			return err
		}
		chains = [][]string{dirs}
	}
	for _, dirs := range chains {
		ops := make([]any, len(dirs))
		for i, d := range dirs {
			ops[i] = &zk.CreateRequest{Path: d, Acl: s.acl}
		}
		_, err := call(ctx, s, func() ([]zk.MultiResponse, error) { return s.c.Multi(ops...) })
		if err == nil {
			return nil
		}
		if !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrNodeExists) {
			return s.mapErr(err)
		}
	}
	if docDir != "" {
		if err := s.ensure(ctx, docDir); err != nil {
			return err
		}
	}
	return s.ensureMarkDirs(ctx, task, key, false)
}

// bucketChain is the directories down to the bucket dir of an index of a kind, outermost first,
// from /once/P/z on; dir alone for a bucket of a task's index, whose directories a document's
// write makes (makeDocDir).
func (s *Store) bucketChain(dir string) []string {
	rest, ok := strings.CutPrefix(dir, s.kindRoot()+"/")
	if !ok {
		return []string{dir}
	}
	out := []string{s.kindRoot()}
	for p := s.kindRoot(); rest != ""; {
		name, more, _ := strings.Cut(rest, "/")
		p += "/" + name
		out = append(out, p)
		rest = more
	}
	return out
}

// madeBelow makes the last of dirs (a chain, outermost first) in one multi that checks the others
// are there; when one is missing it returns those from it on, to make (none: the last is made, or
// was there).
func (s *Store) madeBelow(ctx context.Context, dirs []string) ([]string, error) {
	ops := make([]any, len(dirs))
	for i, d := range dirs[:len(dirs)-1] {
		ops[i] = &zk.CheckVersionRequest{Path: d, Version: -1}
	}
	ops[len(dirs)-1] = &zk.CreateRequest{Path: dirs[len(dirs)-1], Acl: s.acl}
	res, err := call(ctx, s, func() ([]zk.MultiResponse, error) { return s.c.Multi(ops...) })
	i := firstFailed(res)
	switch {
	case err == nil, errors.Is(err, zk.ErrNodeExists) && i == len(dirs)-1:
		return nil, nil
	case errors.Is(err, zk.ErrNoNode) && i >= 0 && i < len(dirs)-1 && len(res) == len(dirs):
		return dirs[i:], nil
	}
	return nil, s.mapErr(err)
}

// missingDirs returns those of dirs (a chain, outermost first) that do not exist: from the
// outermost missing one on, found by one multi of checks (one round trip), which fails at it.
func (s *Store) missingDirs(ctx context.Context, dirs []string) ([]string, error) {
	ops := make([]any, len(dirs))
	for i, d := range dirs {
		ops[i] = &zk.CheckVersionRequest{Path: d, Version: -1}
	}
	res, err := call(ctx, s, func() ([]zk.MultiResponse, error) { return s.c.Multi(ops...) })
	if err == nil {
		return nil, nil
	}
	if i := firstFailed(res); errors.Is(err, zk.ErrNoNode) && i >= 0 && len(res) == len(dirs) {
		return dirs[i:], nil
	}
	return nil, s.mapErr(err)
}

// putMark creates key's node, its buckets first when missing; one that exists is left.
func (s *Store) putMark(ctx context.Context, task, key string) error {
	for try := 0; ; try++ {
		_, err := call(ctx, s, func() (string, error) { return s.c.Create(s.markPath(task, key), nil, 0, s.acl) })
		switch {
		case err == nil, errors.Is(err, zk.ErrNodeExists):
			return nil
		case errors.Is(err, zk.ErrNoNode) && try == 0:
			if err := s.ensureMarkDirs(ctx, task, key, true); err != nil {
				return err
			}
		default:
			return s.mapErr(err)
		}
	}
}

// putMarks puts keys in task's index, 32 at a time in parallel (go-zookeeper pipelines them on its
// session): the first write of a document an older once wrote puts up to 80 (archiveAt attempts
// and events), which one after the other cost a round trip each on a run's path.
func (s *Store) putMarks(ctx context.Context, task string, keys []string) error {
	errs := make([]error, len(keys))
	parallel(len(keys), func(i int) { errs[i] = s.putMark(ctx, task, keys[i]) })
	return errors.Join(errs...)
}

// HistoryIndexed is cached once seen true, as on the other stores: a page does not pay a round
// trip for it.
func (k kv) HistoryIndexed(ctx context.Context) (bool, error) {
	s := k.s
	if s.histBuilt.Load() {
		return true, nil
	}
	ok, err := call(ctx, s, func() (bool, error) { ok, _, err := s.c.Exists(s.historyIndexed()); return ok, err })
	if err != nil {
		return false, s.mapErr(err)
	}
	s.histBuilt.Store(ok)
	return ok, nil
}

func (k kv) KindsIndexed(ctx context.Context) (bool, error) {
	s := k.s
	if s.kindBuilt.Load() {
		return true, nil
	}
	ok, err := call(ctx, s, func() (bool, error) { ok, _, err := s.c.Exists(s.kindsIndexed()); return ok, err })
	if err != nil {
		return false, s.mapErr(err)
	}
	s.kindBuilt.Store(ok)
	return ok, nil
}

func (k kv) IndexKinds(ctx context.Context, docs []*kvstore.Doc) error {
	s := k.s
	for _, d := range docs {
		if err := s.putMarks(ctx, d.Task, d.KindMarks()); err != nil {
			return err
		}
	}
	for _, flag := range []string{s.kindsIndexed1(), s.kindsIndexed()} {
		if err := s.ensure(ctx, flag); err != nil {
			return err
		}
	}
	s.kindBuilt.Store(true)
	return nil
}

func (k kv) IndexHistory(ctx context.Context, docs []*kvstore.Doc) error {
	s := k.s
	for _, d := range docs {
		if err := s.putMarks(ctx, d.Task, d.Marks()); err != nil {
			return err
		}
	}
	if err := s.ensure(ctx, s.historyIndexed()); err != nil {
		return err
	}
	s.histBuilt.Store(true)
	return nil
}

// HistoryTasks lists the tasks with an index: the children of /once/P/x.
func (k kv) HistoryTasks(ctx context.Context) ([]string, error) {
	s := k.s
	kids, err := s.childrenOrNone(ctx, s.historyRoot())
	if err != nil {
		return nil, err
	}
	for i, t := range kids {
		kids[i] = unesc(t)
	}
	return kids, nil
}

// ReadMarks walks each range's buckets from its From on, 16 ranges at a time in parallel
// (go-zookeeper pipelines them on its session): a page of history across tasks reads each task's
// index, three levels of buckets and their marks, which one task after the other cost four round
// trips or more a task.
func (k kv) ReadMarks(ctx context.Context, rs []kvstore.MarkRange) ([][]string, error) {
	out := make([][]string, len(rs))
	errs := make([]error, len(rs))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, r := range rs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i], errs[i] = k.s.readMarks(ctx, r)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// readMarks reads one range: the task's buckets, level by level, in the range's order, and the
// marks of the L3 buckets, up to its limit.
func (s *Store) readMarks(ctx context.Context, r kvstore.MarkRange) ([]string, error) {
	var out []string
	pre := kvstore.KindPrefix(r.Kind)
	r.From = strings.TrimPrefix(r.From, pre) // the names are the keys after it
	// within reports whether a name (a bucket's, or a mark's) may hold keys of the range: a
	// bucket is a prefix of its keys, so it is compared on From's same prefix, inclusive.
	within := func(name string, bucket bool) bool {
		if r.From == "" {
			return true
		}
		if bucket {
			from := r.From[:min(len(r.From), len(name))]
			return r.Up && name >= from || !r.Up && name <= from
		}
		return r.Up && name > r.From || !r.Up && name < r.From
	}
	order := func(kids []string) []string {
		slices.Sort(kids)
		if !r.Up {
			slices.Reverse(kids)
		}
		return kids
	}
	listed, found := 0, 0 // L3 buckets listed, and their marks in the range: how dense they are
	var walk func(dir string, level int) (bool, error)
	walk = func(dir string, level int) (bool, error) { // true: the page is full
		kids, err := s.childrenOrNone(ctx, dir)
		if err != nil {
			return false, err
		}
		var buckets []string
		for _, k := range order(kids) {
			if within(k, true) {
				buckets = append(buckets, k)
			}
		}
		if level < len(markLevels)-1 {
			for _, b := range buckets {
				if full, err := walk(dir+"/"+b, level+1); full || err != nil {
					return full, err
				}
			}
			return false, nil
		}
		for len(buckets) > 0 { // L3 buckets: the first alone, then as many at once as its marks say are needed
			n := 1
			if listed > 0 {
				n = min(len(buckets), max(1, (r.Limit-len(out))*listed/max(found, 1)), 32)
			}
			listed += n
			marks, err := s.listAll(ctx, dir, buckets[:n])
			if err != nil {
				return false, err
			}
			for i, keys := range marks {
				if len(keys) == 0 { // emptied by prunes: gone, unless written into meanwhile
					_, _ = call(ctx, s, func() (struct{}, error) { return struct{}{}, s.c.Delete(dir+"/"+buckets[i], -1) })
				}
				for _, key := range order(keys) {
					if within(key, false) {
						found++
						if out = append(out, pre+key); len(out) == r.Limit {
							return true, nil
						}
					}
				}
			}
			buckets = buckets[n:]
		}
		return false, nil
	}
	_, err := walk(s.indexDir(r.Task, r.Kind), 0)
	return out, err
}

// listAll lists the children of dir's children names, in parallel.
func (s *Store) listAll(ctx context.Context, dir string, names []string) ([][]string, error) {
	out := make([][]string, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = s.childrenOrNone(ctx, dir+"/"+n)
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// Unmark deletes the marks, then the buckets (and directories) they leave empty (a forget's, a prune's: the pages
// that would find them empty start from the newest and seldom reach them, so without this a
// task's index kept an empty bucket per second it ran in).
// The deletes go 32 at a time in parallel (go-zookeeper pipelines them on its session).
func (k kv) Unmark(ctx context.Context, task string, keys []string) error {
	s := k.s
	dirs := map[string]bool{}
	errs := make([]error, len(keys))
	parallel(len(keys), func(i int) {
		_, err := call(ctx, s, func() (struct{}, error) { return struct{}{}, s.c.Delete(s.markPath(task, keys[i]), -1) })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			errs[i] = s.mapErr(err)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, key := range keys {
		dirs[s.markDir(task, key)] = true
	}
	list := make([]string, 0, len(dirs))
	for dir := range dirs {
		list = append(list, dir)
	}
	parallel(len(list), func(i int) {
		// The buckets, then the index's directory (a kind's, and the task's under /z): a task whose
		// last document went (once prune --forget-slots) leaves no directory behind, and no name in
		// HistoryTasks. A write into a directory deleted meanwhile makes it again (fixMark).
		levels := len(markLevels) + 1
		if strings.HasPrefix(list[i], s.kindRoot()+"/") {
			levels++
		}
		s.dropEmpty(ctx, list[i], levels)
	})
	return nil
}

// parallel calls f(0) … f(n-1), 32 at a time.
func parallel(n int, f func(i int)) {
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

// dropEmpty deletes the bucket dir and up to levels-1 buckets above it, innermost first, while
// they are empty: a delete of one that is not (a write put a mark in it meanwhile) fails and is
// left, and a write into a bucket deleted meanwhile makes it again (fixMark).
func (s *Store) dropEmpty(ctx context.Context, dir string, levels int) {
	for range levels {
		_, err := call(ctx, s, func() (struct{}, error) { return struct{}{}, s.c.Delete(dir, -1) })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return
		}
		dir = dir[:strings.LastIndex(dir, "/")]
	}
}

// markOps are the multi ops that keep d's marks with its write: creates of those it adds (with
// their L3 buckets, first), deletes of those it removes. A document an older once wrote (its marks
// not known to be in) has its marks created before the multi instead, one that exists left: they
// name entries it holds already.
func (s *Store) markOps(ctx context.Context, d *kvstore.Doc, ver kvstore.Version) ([]any, error) {
	add, del := d.MarkChanges()
	var ops []any
	if ver > 0 && len(d.ReadMarks()) == 0 {
		if err := s.putMarks(ctx, d.Task, add); err != nil {
			return nil, err
		}
		add = nil
	}
	// Those of a kind an earlier once did not index (no "hk2"), which the indexes' build put already
	// (IndexKinds): up to 40 in a slot's document (archiveAt), each of which, there, would fail the
	// multi once (TestEarlierKindMarksExist).
	var held []string
	for _, m := range add {
		if _, ok := slices.BinarySearch(d.Unknown(), m); ok {
			held = append(held, m)
		}
	}
	if len(held) > 0 {
		if err := s.putMarks(ctx, d.Task, held); err != nil {
			return nil, err
		}
		add = slices.DeleteFunc(add, func(m string) bool { _, ok := slices.BinarySearch(held, m); return ok })
	}
	// The buckets of the task's index first, then those of its indexes of a kind: a multi that
	// fails at a kind's (its L2 bucket missing) tells that the others are not there yet, and one
	// that fails at one of the task's (there: a write in the same second) has the kinds' looked up
	// with their directories (dropBuckets).
	dirs := map[string]bool{}
	for _, kinds := range []bool{false, true} {
		for _, m := range add {
			if kind, _ := kvstore.SplitKind(m); (kind != "") != kinds {
				continue
			}
			if dir := s.markDir(d.Task, m); !dirs[dir] {
				dirs[dir] = true
				ops = append(ops, &zk.CreateRequest{Path: dir, Acl: s.acl})
			}
		}
	}
	for _, m := range add {
		ops = append(ops, &zk.CreateRequest{Path: s.markPath(d.Task, m), Acl: s.acl})
	}
	for _, m := range del {
		ops = append(ops, &zk.DeleteRequest{Path: s.markPath(d.Task, m), Version: -1})
	}
	return ops, nil
}

// fixMark handles a multi that failed on the mark op op: a create of a bucket or a mark that
// exists, or a delete of a mark gone, is dropped (drop); a create under a bucket not made yet makes
// the buckets above it. ok is false when op is none of these.
func (s *Store) fixMark(ctx context.Context, task string, op any, err error) (drop, ok bool, ferr error) {
	switch o := op.(type) {
	case *zk.CreateRequest:
		name := o.Path[strings.LastIndex(o.Path, "/")+1:]
		bucket := len(name) == markLevels[len(markLevels)-1]
		name = s.pathKey(task, o.Path, name)
		if errors.Is(err, zk.ErrNodeExists) { // a mark left by a delete that stopped half way is one too
			return true, true, nil
		}
		if errors.Is(err, zk.ErrNoNode) {
			if !bucket { // its bucket was left out of the multi as there, and is gone since (a page found it empty)
				return false, true, s.ensureMarkDirs(ctx, task, name, true)
			}
			return false, true, s.makeMarkDirs(ctx, task, name+"0", "")
		}
	case *zk.DeleteRequest:
		if errors.Is(err, zk.ErrNoNode) {
			return true, true, nil
		}
	}
	return false, false, nil
}
