#!/usr/bin/env python3
"""MESHDMA_DEBUG / MESHDMA_DEBUG_SUBSYS / MESHDMA_DEBUG_FILE on a program.

  check_logging.py [--algorithm=NAME] PROGRAM [ARGS...]

1. unset: nothing on stderr;
2. INFO into a file: the launch (every device), the path to peers, and the
   algorithm choice of collective NAME (default psum, which the
   program must make), each once;
3. INFO with SUBSYS=collectives: only collectives lines;
4. INFO with SUBSYS=^collectives: no collectives line.
"""
import os
import subprocess
import sys
import tempfile


ALGORITHM = "psum"
if len(sys.argv) > 1 and sys.argv[1].startswith("--algorithm="):
    ALGORITHM = sys.argv.pop(1).split("=", 1)[1]


def run(extra):
    env = dict(os.environ)
    for k in ("MESHDMA_DEBUG", "MESHDMA_DEBUG_SUBSYS", "MESHDMA_DEBUG_FILE"):
        env.pop(k, None)
    env.update(extra)
    return subprocess.run(sys.argv[1:], capture_output=True, text=True,
                          timeout=300, env=env)


def main():
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    r = run({})
    expect(r.returncode == 0, f"plain run exits 0: {r.stderr}")
    expect(r.stderr == "", f"nothing on stderr by default: {r.stderr!r}")

    log = os.path.join(tempfile.mkdtemp(), "log.%p.txt")
    r = run({"MESHDMA_DEBUG": "INFO", "MESHDMA_DEBUG_FILE": log})
    expect(r.returncode == 0 and r.stderr == "",
           f"INFO into a file: stderr {r.stderr!r}")
    files = [os.path.join(os.path.dirname(log), f)
             for f in os.listdir(os.path.dirname(log))]
    expect(len(files) == 1 and str(r.args) and "%p" not in files[0],
           f"one file, %p replaced: {files}")
    text = open(files[0]).read() if files else ""
    lines = text.splitlines()
    expect(all(" meshdma INFO " in l for l in lines), "every line tagged INFO")
    launch = [l for l in lines if "INFO init: launch:" in l]
    expect(len(launch) == 1, f"the launch once: {launch}")
    devices = [l for l in lines if "INFO init:   device " in l]
    expect(len(devices) >= 1, "the launch's devices")
    expect(any("INFO transport: rank 0 reaches devices" in l for l in lines),
           "the paths")
    algo = [l for l in lines
            if f"INFO collectives: {ALGORITHM} on " in l]
    expect(len(algo) >= 1 and len(algo) == len(set(l.split(" meshdma ")[1]
                                                   for l in algo)),
           f"each algorithm choice once: {algo}")

    r = run({"MESHDMA_DEBUG": "INFO", "MESHDMA_DEBUG_SUBSYS": "collectives"})
    err = r.stderr.splitlines()
    expect(err and all("INFO collectives:" in l for l in err),
           f"SUBSYS=collectives: {err}")
    r = run({"MESHDMA_DEBUG": "INFO", "MESHDMA_DEBUG_SUBSYS": "^collectives"})
    expect(r.stderr and "collectives:" not in r.stderr,
           f"SUBSYS=^collectives: {r.stderr!r}")
    for f in failures:
        print("FAILED:", f)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
