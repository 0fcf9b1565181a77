#!/usr/bin/env python3
"""Checks a meshdma program's command line: --help, unknown flags, bad values.

  check_cli.py PROGRAM NAME [--flag F]... [--bad 'ARGS|FLAG|VALUE']...
               [--ok 'ARGS'] [--env K=V]...

--help must exit 0 and print "usage: NAME" and every --flag F; an unknown
flag must exit 2 naming it; each --bad must exit 2 with an error that names
FLAG and VALUE. No error may name a source file. Each --ok must exit 0.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys

SOURCE_FILE = re.compile(r"[\w/.-]+\.(cc|h|cpp|hpp)\b")


def run(cmd, env):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env=env)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("program")
    p.add_argument("name")
    p.add_argument("--flag", action="append", default=[])
    p.add_argument("--bad", action="append", default=[])
    p.add_argument("--ok", action="append", default=[])
    p.add_argument("--env", action="append", default=[])
    a = p.parse_args()
    env = dict(os.environ)
    for kv in a.env:
        k, v = kv.split("=", 1)
        env[k] = v
    failures = []

    def check(cond, what, r=None):
        if not cond:
            detail = "" if r is None else (
                f"\n  exit {r.returncode}\n  stdout: {r.stdout[-2000:]!r}"
                f"\n  stderr: {r.stderr[-2000:]!r}")
            failures.append(what + detail)

    for spelling in ["--help", "-h"]:
        r = run([a.program, spelling], env)
        check(r.returncode == 0, f"{spelling} exits 0", r)
        check(f"usage: {a.name}" in r.stdout, f"{spelling} prints the usage", r)
        for f in a.flag:
            check(re.search(r"(^|[\s,])" + re.escape(f) + r"\b", r.stdout)
                  is not None, f"--help lists {f}", r)
        check(SOURCE_FILE.search(r.stdout) is None,
              "--help names no source file", r)

    r = run([a.program, "--no-such-flag"], env)
    check(r.returncode == 2, "an unknown flag exits 2", r)
    check("--no-such-flag" in r.stderr, "the error names the unknown flag", r)
    check(SOURCE_FILE.search(r.stderr) is None, "no source file in errors", r)

    for bad in a.bad:
        args, flag, value = bad.split("|")
        r = run([a.program] + shlex.split(args), env)
        check(r.returncode == 2, f"'{args}' exits 2", r)
        check(flag in r.stderr, f"'{args}': the error names {flag}", r)
        check(f"'{value}'" in r.stderr,
              f"'{args}': the error quotes the value '{value}'", r)
        check(SOURCE_FILE.search(r.stderr) is None,
              f"'{args}': no source file in the error", r)

    for ok in a.ok:
        r = run([a.program] + shlex.split(ok), env)
        check(r.returncode == 0, f"'{ok}' exits 0", r)

    for f in failures:
        print("FAILED:", f)
    print(f"{a.name}: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
