package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// pageKV is a KeyKV in memory that pages its keys in order, as etcd's and ZooKeeper's Page do, and
// records what Forget asks of it.
type pageKV struct {
	recs  map[string]KeyRec
	ver   int
	calls []string // "list", "page N" (N keys), "apply N"
}

func (p *pageKV) Batch() int { return 100 }
func (p *pageKV) Create(context.Context, string, []string, []KeyRec) ([]bool, error) {
	return nil, errors.New("not used")
}
func (p *pageKV) Now(context.Context) (time.Time, error)        { return time.Now(), nil }
func (p *pageKV) Leases(context.Context) ([]store.Lease, error) { return nil, nil }
func (p *pageKV) Scopes(context.Context, string, int) ([]string, string, error) {
	return nil, "", nil
}

func (p *pageKV) Get(_ context.Context, _ string, keys []string) (map[string]StoredKey, error) {
	m := map[string]StoredKey{}
	for _, key := range keys {
		if r, ok := p.recs[key]; ok {
			m[key] = StoredKey{Rec: r, Ver: strconv.Itoa(p.ver)}
		}
	}
	return m, nil
}

func (p *pageKV) List(ctx context.Context, scope string) (map[string]StoredKey, error) {
	p.calls = append(p.calls, "list")
	return p.Get(ctx, scope, p.sorted())
}

func (p *pageKV) Apply(_ context.Context, _ string, ch []KeyChange) (bool, error) {
	p.calls = append(p.calls, fmt.Sprintf("apply %d", len(ch)))
	for _, c := range ch {
		if c.Rec == nil {
			delete(p.recs, c.Key)
		} else {
			p.recs[c.Key] = *c.Rec
		}
	}
	p.ver++
	return true, nil
}

func (p *pageKV) sorted() []string {
	keys := make([]string, 0, len(p.recs))
	for key := range p.recs {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	return keys
}

func (p *pageKV) Page(_ context.Context, _ string, cursor string, limit int) ([]string, []KeyRec, string, error) {
	all := p.sorted()
	i, _ := slices.BinarySearch(all, cursor)
	if i < len(all) && all[i] == cursor {
		i++
	}
	page := all[i:min(i+limit, len(all))]
	next := ""
	if i+limit < len(all) {
		next = page[len(page)-1]
	}
	recs := make([]KeyRec, len(page))
	for j, key := range page {
		recs[j] = p.recs[key]
	}
	p.calls = append(p.calls, fmt.Sprintf("page %d", len(page)))
	return page, recs, next, nil
}

// namesKV is a pageKV that lists the scope's names (KeyNamesKV), as etcd and ZooKeeper do.
type namesKV struct{ *pageKV }

func (n namesKV) Names(context.Context, string) ([]string, error) {
	n.calls = append(n.calls, fmt.Sprintf("names %d", len(n.recs)))
	return n.sorted(), nil
}

// TestForgetPages: Forget reads a large scope a page of store.ForgetBatch keys at a time, by Page
// or, where the backend lists names (KeyNamesKV), by the names, and deletes each page's keys before
// reading the next, never the whole scope's records at once (listing 500,000 keys on Redis took 439
// MB), and forgets what store.Keys says: old done keys and unexpiring pending ones, not a key
// claimed after the cutoff nor one pending under a live claimant.
func TestForgetPages(t *testing.T) {
	t.Run("Page", func(t *testing.T) { testForgetPages(t, false) })
	t.Run("Names", func(t *testing.T) { testForgetPages(t, true) })
}

func testForgetPages(t *testing.T, byNames bool) {
	now := time.Now()
	old, young := now.Add(-time.Hour).UnixMicro(), now.Add(time.Hour).UnixMicro()
	p := &pageKV{recs: map[string]KeyRec{}}
	n := 2*store.ForgetBatch + 700
	want := 0
	for i := range n {
		r := KeyRec{State: store.KeyDone, Claimed: old}
		switch i % 10 {
		case 3: // claimed after the cutoff
			r.Claimed = young
		case 5: // pending under a claimant whose expiry is far off
			r = KeyRec{State: store.KeyPending, Claimed: old, TTL: (24 * time.Hour).Microseconds()}
		default:
			want++
		}
		p.recs[fmt.Sprintf("k%06d", i)] = r
	}
	k := &Keys{KV: p, Name: "test"}
	if byNames {
		k.KV = namesKV{p}
	}
	got, err := k.Forget(context.Background(), "s", now, true)
	if err != nil || got != int64(want) || len(p.recs) != n-want {
		t.Fatalf("Forget: %d, %v, %d left; want %d forgotten, %d left", got, err, len(p.recs), want, n-want)
	}
	if byNames {
		for _, c := range p.calls {
			if c[:4] == "page" || c == "list" {
				t.Fatalf("Forget by names read %s", c)
			}
		}
		if len(p.calls) == 0 || p.calls[0] != fmt.Sprintf("names %d", n) {
			t.Fatalf("Forget by names: calls %v; want the names first", p.calls[:min(3, len(p.calls))])
		}
		return
	}
	pages, applied := 0, false
	for _, c := range p.calls {
		switch {
		case c == "list":
			t.Fatal("Forget listed the whole scope")
		case c[:4] == "page":
			if pages > 0 && !applied {
				t.Fatalf("Forget read page %d before deleting the keys of the one before: %v", pages+1, p.calls)
			}
			pages, applied = pages+1, false
		default:
			applied = true
		}
	}
	if pages != 3 {
		t.Errorf("Forget read %d pages of %d keys; want 3 of at most %d", pages, n, store.ForgetBatch)
	}
}
