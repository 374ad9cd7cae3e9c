"""Per-thread CPU time of a command: every thread's time on a CPU and waiting for one.

    python3 bench/thread_cpu.py [--interval-ms 20] -- COMMAND [ARGS...]

Samples /proc/PID/task/*/schedstat (on-CPU and run-queue nanoseconds) every interval while
the command runs, and prints, per thread that used more than 50 ms: its name, when it was
first and last seen, its on-CPU and run-queue seconds. A decoder "busy" in the loader's
figures but short of on-CPU time was waiting inside its task (a lock, a page fault) or for a
CPU (run queue). The command's stdout is passed through; its stderr is not kept.
"""

import argparse
import os
import subprocess
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval-ms", type=float, default=20)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command given")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    seen = {}  # tid -> [name, first_s, last_s, cpu0, cpu1, rq0, rq1]
    t0 = time.monotonic()
    while p.poll() is None:
        now = time.monotonic() - t0
        try:
            tids = os.listdir(f"/proc/{p.pid}/task")
        except FileNotFoundError:
            break
        for tid in tids:
            try:
                with open(f"/proc/{p.pid}/task/{tid}/schedstat") as f:
                    cpu, rq, _ = map(int, f.read().split())
                with open(f"/proc/{p.pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
            except (FileNotFoundError, ProcessLookupError, ValueError):
                continue  # the thread ended between listing and reading
            s = seen.get(tid)
            if s is None:
                seen[tid] = [name, now, now, cpu, cpu, rq, rq]
            else:
                s[0], s[2], s[4], s[6] = name, now, cpu, rq
        time.sleep(a.interval_ms / 1000)
    sys.stdout.write(p.stdout.read())
    for tid, (name, first, last, c0, c1, r0, r1) in sorted(seen.items(), key=lambda x: x[1][1]):
        if c1 - c0 > 5e7:
            print(f"thread {name:16s} {tid:>7s} seen {first:7.2f}-{last:7.2f} s  on-CPU {(c1 - c0) / 1e9:7.3f} s  "
                  f"run queue {(r1 - r0) / 1e9:7.3f} s")
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
