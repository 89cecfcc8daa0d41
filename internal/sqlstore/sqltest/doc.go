// Package sqltest holds the tests PostgreSQL and MySQL share because internal/sqlstore is shared:
// the idle-transaction timeout, the query plans, the open, DSN and benchmark tests that differ
// only in the server's dialect. The helpers every backend shares are in store/storetest.
package sqltest
