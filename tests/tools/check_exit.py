#!/usr/bin/env python3
"""check_exit.py TEXT -- COMMAND...: COMMAND must exit non-zero and say TEXT
on stderr (or stdout)."""
import subprocess
import sys

text = sys.argv[1]
command = sys.argv[sys.argv.index("--") + 1:]
r = subprocess.run(command, capture_output=True, text=True, timeout=100)
ok = r.returncode != 0 and (text in r.stderr or text in r.stdout)
print(f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}")
print("OK" if ok else f"FAILED: want a non-zero exit and {text!r}")
sys.exit(0 if ok else 1)
