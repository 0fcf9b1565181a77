#!/usr/bin/env python3
"""--plot draws a PNG under exactly the name given, whatever it contains.

  check_plot.py BENCH

File names that would be gnuplot code or a gnuplot pipe if they reached
gnuplot's parser ("x'; system('touch P'); '", "|touch P") must produce a
PNG of that name and run nothing. An unwritable name must fail (exit 1).
"""
import os
import subprocess
import sys
import tempfile

PNG = b"\x89PNG\r\n\x1a\n"


def main():
    bench = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp()
    base = [bench, "-b", "8", "-e", "4K", "-f", "8", "--repeats", "1", "-w",
            "0", "-n", "2"]
    failures = []
    names = ["plain.png", "x'; system('touch pwned1'); '.png",
             'y"; system("touch pwned2"); ".png', "|touch pwned3",
             "<touch pwned4"]
    for name in names:
        r = subprocess.run(base + ["--plot", name], cwd=tmp,
                           capture_output=True, text=True, timeout=300)
        path = os.path.join(tmp, name)
        if r.returncode != 0:
            failures.append(f"{name!r}: exit {r.returncode}: {r.stderr}")
        elif not os.path.exists(path) or open(path, "rb").read(8) != PNG:
            failures.append(f"{name!r}: no PNG under that name")
    for i in range(1, 5):
        if os.path.exists(os.path.join(tmp, f"pwned{i}")):
            failures.append(f"a file name ran a command (pwned{i})")
    r = subprocess.run(base + ["--plot", "/nonexistent-dir/p.png"], cwd=tmp,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 1 or "/nonexistent-dir/p.png" not in r.stderr:
        failures.append(f"unwritable --plot: exit {r.returncode} {r.stderr!r}")
    for f in failures:
        print("FAILED:", f)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
