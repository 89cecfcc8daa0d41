package slot

// Embed the zone database so --tz works on hosts without /usr/share/zoneinfo (minimal
// containers); the system copy still wins when present.
import _ "time/tzdata"
