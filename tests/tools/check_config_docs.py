#!/usr/bin/env python3
"""The configuration table, its docs page and its readers agree.

  check_config_docs.py SOURCE_DIR INFO

1. `INFO --config --json` (meshdma-info) lists every variable of
   meshdma/base/config.h once, each with a type, a default and a doc;
2. docs/configuration.md's table of the library's variables has one row per
   variable with the same type, default and range, and no other row;
3. no source under meshdma/, tools/, bench/ or python/csrc/ reads a
   MESHDMA_* variable by its string (`getenv("MESHDMA_...")` or
   `Env...("MESHDMA_...")`): each reads it through its row;
4. `INFO --config` reports a value set in the environment.
"""
import json
import os
import re
import subprocess
import sys


def table_rows(doc):
    """The rows of the first table whose header starts with `| variable |`."""
    rows, inside = {}, False
    for line in doc.splitlines():
        if line.startswith("| variable |"):
            inside = True
            continue
        if inside and line.startswith("|---") or inside and line.startswith("| ---"):
            continue
        if inside and not line.startswith("|"):
            break
        if inside:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            name = cells[0].strip("`")
            rows[name] = cells
    return rows


def unquote(cell):
    return cell.replace("`", "").replace("\\|", "|").strip()


def main():
    source_dir, info = sys.argv[1], sys.argv[2]
    failures = []

    # Step 1: the table as meshdma-info prints it.
    out = subprocess.run([info, "--config", "--json"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    table = json.loads(out)["configuration"]
    names = [v["name"] for v in table]
    if len(names) != len(set(names)):
        failures.append(f"a variable listed twice: {names}")
    for v in table:
        if not v["name"].startswith("MESHDMA_") or not v["doc"] or \
                not v["default"] or v["type"] not in (
                    "bool", "int", "seconds", "choice", "string"):
            failures.append(f"incomplete row: {v}")

    # Step 2: the docs page.
    with open(os.path.join(source_dir, "docs", "configuration.md")) as f:
        rows = table_rows(f.read())
    for v in table:
        row = rows.get(v["name"])
        if row is None:
            failures.append(f"{v['name']} is not in docs/configuration.md")
            continue
        want = [v["type"], v["default"], v["range"]]
        got = [unquote(c) for c in row[1:4]]
        if got != want:
            failures.append(f"{v['name']}: docs say {got}, the table {want}")
    for name in rows:
        if name not in names:
            failures.append(f"docs/configuration.md lists {name}, which the "
                            "table does not")

    # Step 3: no reader by string.
    reader = re.compile(r'(getenv|Env[A-Za-z]*)\(\s*"MESHDMA_')
    for top in ("meshdma", "tools", "bench", os.path.join("python", "csrc")):
        for root, _, files in os.walk(os.path.join(source_dir, top)):
            for name in files:
                if not name.endswith((".cc", ".h")):
                    continue
                path = os.path.join(root, name)
                with open(path, errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        if reader.search(line):
                            failures.append(
                                f"{os.path.relpath(path, source_dir)}:{n} "
                                "reads a MESHDMA_* variable by its string")

    # Step 4: a value set here is reported.
    env = dict(os.environ, MESHDMA_DMA_MODE="eager")
    out = subprocess.run([info, "--config", "--json"], capture_output=True,
                         text=True, timeout=60, check=True, env=env).stdout
    values = {v["name"]: v["value"] for v in json.loads(out)["configuration"]}
    if values.get("MESHDMA_DMA_MODE") != "eager":
        failures.append(f"MESHDMA_DMA_MODE=eager reported as "
                        f"{values.get('MESHDMA_DMA_MODE')!r}")

    for f in failures:
        print("FAIL:", f)
    print(f"{len(table)} variables, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
