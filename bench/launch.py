#!/usr/bin/env python3
"""Start N commands at once (as cron does at midnight) or one after another, and time each.

  launch.py N [--seq] [--stderr FILE] -- COMMAND [ARG...]

"{i}" in any argument is replaced by the launch's index (0 … N-1). Every launch is started with
posix_spawn, as fast as the machine allows; its time runs from its own spawn to its exit, as
reaped. Prints one JSON object: {"wall": seconds for all N, "runs": [{"i", "code", "elapsed"}]}.
stdout and stdin are /dev/null; stderr goes to FILE (appended) or /dev/null.

  launch.py --summary FILE... prints p50/p99 lines for result files (used by the bench scripts).
"""
import json
import os
import sys
import time


def launch(argv):
    dash = argv.index("--")
    opts, cmd = argv[:dash], argv[dash + 1:]
    n, seq, err = int(opts[0]), "--seq" in opts, os.devnull
    if "--stderr" in opts:
        err = opts[opts.index("--stderr") + 1]
    null = os.open(os.devnull, os.O_RDWR)
    errfd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    fa = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, errfd, 2)]
    index, start, runs = {}, {}, []

    def reaped(pid, status):
        runs.append({"i": index[pid], "code": os.waitstatus_to_exitcode(status),
                     "elapsed": time.monotonic() - start[pid]})

    t0 = time.monotonic()
    for i in range(n):
        args = [a.replace("{i}", str(i)) for a in cmd]
        s = time.monotonic()
        pid = os.posix_spawnp(args[0], args, os.environ, file_actions=fa)
        index[pid], start[pid] = i, s
        if seq:
            reaped(*os.waitpid(pid, 0))
    while len(runs) < n:
        reaped(*os.wait())
    json.dump({"wall": time.monotonic() - t0, "runs": sorted(runs, key=lambda r: r["i"])}, sys.stdout)


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] if v else float("nan")


def summary(files):
    for f in files:
        d = json.load(open(f))
        codes = {}
        for r in d["runs"]:
            codes[r["code"]] = codes.get(r["code"], 0) + 1
        el = [r["elapsed"] for r in d["runs"]]
        print(f"{f}: wall {d['wall']:.2f}s exit codes {codes} p50 {pct(el, 50)*1e3:.0f} ms p99 {pct(el, 99)*1e3:.0f} ms")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--summary"]:
        summary(sys.argv[2:])
    else:
        launch(sys.argv[1:])
