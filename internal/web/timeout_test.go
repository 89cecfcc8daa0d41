package web

import "time"

// The pages of these tests read seeded ledgers under -race on a loaded machine: seconds, not a
// hang. The tests of the deadline set Config.StoreTimeout themselves.
func init() { defaultStoreTimeout = 2 * time.Minute }
