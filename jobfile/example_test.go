package jobfile_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/once-run/once/jobfile"
)

// Load reads a directory of drop-ins: TOML jobs files and crontabs, in name order.
func ExampleLoad() {
	dir, _ := os.MkdirTemp("", "jobs")
	defer os.RemoveAll(dir)
	_ = os.WriteFile(filepath.Join(dir, "10-backup.toml"), []byte(`
[defaults]
tz = "UTC"

[[job]]
name = "backup"
schedule = "0 2 * * *"
command = ["/usr/local/bin/backup", "--full"]
timeout = "1h"
`), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "20-legacy.crontab"), []byte(`CRON_TZ=Europe/Berlin
# once: name=report overlap=buffer-one
*/15 * * * * /usr/local/bin/report
`), 0o644)

	jobs, err := jobfile.Load(dir)
	if err != nil {
		fmt.Println(err) // file:line: what is wrong: how to fix it
		return
	}
	for _, j := range jobs {
		spec, _ := j.Spec()
		fmt.Printf("%s: %q in %s, %q, overlap %s\n", j.Name, j.Schedule, spec.Location(), j.Command, j.Overlap)
	}
	// Output:
	// backup: "0 2 * * *" in UTC, ["/usr/local/bin/backup" "--full"], overlap skip
	// report: "*/15 * * * *" in Europe/Berlin, ["sh" "-c" "/usr/local/bin/report"], overlap buffer-one
}
