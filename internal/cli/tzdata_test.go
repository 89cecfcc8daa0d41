package cli

// The backfill tests name zones: embed the zone database so they pass on hosts without
// /usr/share/zoneinfo, as the once binary does (cmd/once imports time/tzdata).
import _ "time/tzdata"
