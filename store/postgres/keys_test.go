package postgres

import (
	"testing"

	"github.com/once-run/once/internal/sqlstore/sqltest"
	"github.com/once-run/once/store/storetest"
)

// TestKeysUpgradeFromV1: a version 1 schema (no keys table) is upgraded to version 2 on open, under
// the migration lock, and keeps its leases.
func TestKeysUpgradeFromV1(t *testing.T) {
	sqltest.KeysUpgradeFromV1(t, withPrefix(t, serverDSN(t)), opener)
}

// Forget deletes in batches (store.ForgetBatch), with the answers of one statement.
func TestKeysForgetBatched(t *testing.T) { storetest.KeysForgetBatched(t, harness()) }
