// Package jobfile reads the jobs file of `once daemon --jobs PATH`: a TOML file (*.toml), a crontab
// (*.crontab), or a directory of such drop-ins, into validated Jobs. It also turns a crontab into the
// TOML form (ImportCrontab). It schedules nothing: the scheduler takes the Jobs it returns.
//
// Parsing is strict. Every error is an *Error, one line "file:line: what is wrong: how to fix it":
// an unknown key, a bad schedule, zone, duration, name or value, a missing name, schedule or
// command, a job name defined twice. The reference of both formats is docs/jobs-file.md.
package jobfile
