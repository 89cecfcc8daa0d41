package keys

// WithoutReturning makes k claim on MySQL as it does on MySQL 8 (INSERT IGNORE, then the claim-id
// read-back of a partly new batch) even when the server is MariaDB, so that the test servers
// (MariaDB) cover both paths.
func WithoutReturning(k *Keys) { k.returning.Store(2) }

// SQLiteProbing reports whether k's next SQLite batch starts with the probe for missing keys (its
// last batch was all old).
func SQLiteProbing(k *Keys) bool { return k.liteOld.Load() }

// SetSQLiteProbing sets whether k's next SQLite batch starts with the probe for missing keys.
func SetSQLiteProbing(k *Keys, on bool) { k.liteOld.Store(on) }
