package zk

import (
	"testing"

	"github.com/once-run/once/store/storetest"
)

func TestKeysConformance(t *testing.T) { storetest.RunKeys(t, harness()) }

// BenchmarkKeys: Claim in batches of 1,000 at 0%, 50% and 100% duplicates (docs/effects.md).
func BenchmarkKeys(b *testing.B) { storetest.RunKeysBenchmarks(b, harness()) }
