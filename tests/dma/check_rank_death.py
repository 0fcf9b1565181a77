#!/usr/bin/env python3
"""Runs rank_death_main under mpirun and times every process's exit.

Usage: check_rank_death.py MODE TIMEOUT_S MPIRUN [MPIRUN ARGS...] BINARY

Every live process must exit nonzero within TIMEOUT_S plus the fault
grace docs/semantics.md states (min(T / 10, 0.5 s) + min(T, 1 s)) and a margin for
a loaded machine (before TIMEOUT_S where rank 1 dies: every process runs on
this machine, where the others notice its exit at once), and the output must
name the lost rank (1). Where a wait timed out (stop, hang), the Status of
every live process carries the mesh-wide picture. A process stopped forever
(MODE stop) is killed here once the others are done, as an operator would;
under `mpirun --enable-recovery` nothing else would end it.
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] not in "ZX"
    except (OSError, IndexError):
        # Gone between the open and the read (ProcessLookupError), or never
        # there.
        return False


def launched_ranks(launcher_args):
    """The rank count the launcher's -n / -np argument asks for."""
    for flag in ("-n", "-np"):
        if flag in launcher_args:
            return int(launcher_args[launcher_args.index(flag) + 1])
    return None


def launcher_lingers(ranks, pids, exited, started, now):
    """True when every rank started has exited at least 10 s ago."""
    if ranks is None or len(pids) < ranks or len(exited) < ranks:
        return False
    return all(now - (started[r] + exited[r]) > 10 for r in exited)


def main():
    mode, timeout = sys.argv[1], float(sys.argv[2])
    # Each process reports its own exit status: mpirun's is not reliable
    # under --enable-recovery.
    cmd = sys.argv[3:-1] + [
        "/bin/sh", "-c",
        '"$0" "$@"; echo "process $$ exit status $?"', sys.argv[-1], mode]
    env = dict(os.environ, MESHDMA_WAIT_TIMEOUT_S=str(timeout))
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, text=True)
    lines, pids, exited, started = [], {}, {}, {}

    def reader():
        for line in proc.stdout:
            lines.append(line)
            sys.stdout.write(line)
            m = re.match(r"rank (\d+) pid (\d+)", line)
            if m:
                pids[int(m.group(1))] = int(m.group(2))
                started[int(m.group(1))] = time.monotonic()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    # Processes that must exit nonzero, and those whose exit is timed.
    live = [0] if mode != "hang" else [0, 1]
    timed = [0] if mode not in ("early", "hang") else [0, 1]
    # From the runtime's start: the wait timeout, the fault grace (the
    # mesh-wide report's, min(T / 10, 0.5 s)), the aborted shutdown's wait
    # (min(T, 1 s)) and a margin for a loaded machine.
    limit = timeout + min(timeout / 10, 0.5) + min(timeout, 1.0) + 1.0
    if mode == "again":  # Plus the refused Run's barrier.
        limit += timeout
    # A process that dies is noticed at once by the others of its machine
    # (meshdma watches them for exit), not when a wait times out.
    if mode in ("exit", "exit0", "kill", "kill_sending"):
        limit = timeout - 0.5
    hard = start + 3 * timeout + 30
    ranks = launched_ranks(sys.argv[3:-1])
    while proc.poll() is None and time.monotonic() < hard:
        now = time.monotonic()
        for r, pid in list(pids.items()):
            if r not in exited and not alive(pid):
                exited[r] = now - started[r]
        if launcher_lingers(ranks, pids, exited, started, now):
            # Every rank has exited; only Open MPI's launcher has not (its
            # PMIx, under --enable-recovery, now and then): what is timed
            # here is meshdma's processes, so it is ended as an operator would.
            print("note: mpirun lingered 10 s after every rank had exited; ended here")
            proc.kill()
            proc.wait()
            break
        if (mode in ("stop", "again") and 1 in pids
                and all(r in exited for r in timed)):
            try:
                os.kill(pids[1], signal.SIGKILL)  # An operator ends it.
            except ProcessLookupError:
                pass  # mpirun did.
        time.sleep(0.05)
    if proc.poll() is None:
        for pid in pids.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.kill()
        print(f"FAIL: the launch was still running after {hard - start:.0f} s")
        return 1
    t.join(5)
    now = time.monotonic()
    for r in pids:
        exited.setdefault(r, now - started[r])
    out = "".join(lines)
    ok = True
    statuses = [int(s) for s in re.findall(r"exit status (\d+)", out)]
    for r in timed:
        print(f"rank {r} ({mode}): exited {exited.get(r, -1):.2f} s after "
              "its runtime started")
        if exited.get(r, 1e9) > limit:
            print(f"FAIL: rank {r} took longer than {limit:.1f} s")
            ok = False
    if sum(1 for s in statuses if s != 0) < len(live):
        print(f"FAIL: exit statuses {statuses}: a live process exited 0")
        ok = False
    if not re.search(r"rank(\(s\))? 1\b", out):
        print("FAIL: no message names rank 1")
        ok = False
    if mode in ("stop", "hang"):
        pictures = dict(re.findall(
            r"rank (\d+) mesh-wide picture in its Status: (\d)", out))
        for r in live:
            if pictures.get(str(r)) != "1":
                print(f"FAIL: rank {r}'s Status lacks the mesh-wide picture")
                ok = False
    if mode == "again":
        # Both later Runs are refused naming rank 1, the second at once.
        again = re.findall(r"rank 0 Run again (\d) after ([\d.]+) s: (.*)",
                           out)
        if len(again) != 2 or not all(
                "refused" in m and re.search(r"rank\(s\) 1\b", m)
                for _, _, m in again):
            print(f"FAIL: later Runs not refused naming rank 1: {again}")
            ok = False
        elif float(again[1][1]) > 1.0:
            print(f"FAIL: the second refusal took {again[1][1]} s")
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
