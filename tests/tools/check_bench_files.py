#!/usr/bin/env python3
"""Runs meshdma-bench with -J and --csv and checks the files against the table.

  check_bench_files.py COLLECTIVE DEVICES [--mpi-baseline] -- COMMAND...

COMMAND is the benchmark's command line (perhaps under mpirun); this script
adds -J and --csv. Every row printed must appear in the JSON and the CSV with
the same values (to the table's two decimals); algbw must be size / time and
busbw algbw times nccl-tests' factor for COLLECTIVE on DEVICES devices; the
"# Avg bus bandwidth" footer must be the mean of the busbw columns; #wrong
must be 0. With --mpi-baseline every row must carry an MPI figure.
"""
import csv
import json
import math
import os
import subprocess
import sys
import tempfile


def factor(collective, n):
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective == "ppermute":
        return 1.0
    return (n - 1) / n


def close(printed, value, what, failures):
    # The table prints two decimals; relative slack for large values.
    if abs(printed - value) > 0.0051 + 1e-6 * abs(value):
        failures.append(f"{what}: table {printed} vs file {value}")


def main():
    argv = sys.argv[1:]
    sep = argv.index("--")
    opts, command = argv[:sep], argv[sep + 1:]
    collective, n = opts[0], int(opts[1])
    want_mpi = "--mpi-baseline" in opts
    tmp = tempfile.mkdtemp()
    jpath, cpath = os.path.join(tmp, "out.json"), os.path.join(tmp, "out.csv")
    r = subprocess.run(command + ["-J", jpath, "--csv", cpath],
                       capture_output=True, text=True, timeout=600)
    print(r.stdout)
    if r.returncode != 0:
        print("exit", r.returncode, r.stderr)
        return 1
    failures = []
    rows, avg = [], None
    for line in r.stdout.splitlines():
        if line.startswith("# Avg bus bandwidth"):
            avg = float(line.split(":")[1])
        if line.startswith("#") or not line.strip():
            continue
        rows.append(line.split())
    data = json.load(open(jpath))
    with open(cpath) as f:
        crows = list(csv.DictReader(f))
    results = data["results"]
    if not (len(rows) == len(results) == len(crows) > 0):
        failures.append(f"rows: table {len(rows)}, JSON {len(results)}, "
                        f"CSV {len(crows)}")
    fac = factor(collective, n)
    busbws = []
    for t, j, c in zip(rows, results, crows):
        size, count, dtype, redop = int(t[0]), int(t[1]), t[2], t[3]
        where = f"size {size} {dtype} {redop}"
        if (j["size"], j["count"], j["type"], j["redop"]) != (
                size, count, dtype, redop):
            failures.append(f"{where}: JSON row {j}")
        if (int(c["size"]), int(c["count"]), c["type"], c["redop"]) != (
                size, count, dtype, redop):
            failures.append(f"{where}: CSV row {c}")
        if j["collective"] != collective or j["devices"] != n:
            failures.append(f"{where}: JSON collective/devices {j}")
        for col, key, ckey in [(5, "out_of_place", ""), (9, "in_place", "ip_")]:
            if t[col] == "N/A":
                if j[key] is not None or c[ckey + "time_us"] != "":
                    failures.append(f"{where}: {key} N/A in the table only")
                continue
            time, algbw, busbw, wrong = (float(t[col]), float(t[col + 1]),
                                         float(t[col + 2]), int(t[col + 3]))
            m = j[key]
            close(time, m["time_us"], f"{where} {key} time JSON", failures)
            close(algbw, m["algbw_GBps"], f"{where} {key} algbw JSON", failures)
            close(busbw, m["busbw_GBps"], f"{where} {key} busbw JSON", failures)
            close(time, float(c[ckey + "time_us"]), f"{where} {key} time CSV",
                  failures)
            close(busbw, float(c[ckey + "busbw_GBps"]),
                  f"{where} {key} busbw CSV", failures)
            if wrong != 0 or m["wrong"] != 0 or int(c[ckey + "wrong"]) != 0:
                failures.append(f"{where}: {key} #wrong {wrong}")
            # nccl-tests' definitions, from the file's unrounded values.
            if not math.isclose(m["algbw_GBps"], size / m["time_us"] / 1e3,
                                rel_tol=1e-3):
                failures.append(f"{where}: {key} algbw != size / time")
            if not math.isclose(m["busbw_GBps"], m["algbw_GBps"] * fac,
                                rel_tol=1e-3, abs_tol=1e-9):
                failures.append(f"{where}: {key} busbw != algbw x {fac}")
            busbws.append(m["busbw_GBps"])
        if want_mpi:
            if t[14] == "N/A" or j["mpi"] is None:
                failures.append(f"{where}: no MPI baseline")
            else:
                close(float(t[14]), j["mpi"]["time_us"], f"{where} mpi_time",
                      failures)
        # of_bound and ip_of_bound: each variant's busbw over the bound's
        # (from the file's unrounded values; the table rounds to 2 places).
        if t[17] != "N/A":
            for key, col in [("out_of_place", 18), ("in_place", 20)]:
                if j[key] is None:
                    if t[col] != "N/A":
                        failures.append(f"{where}: column {col} without "
                                        f"a busbw")
                    continue
                want = j[key]["busbw_GBps"] / j["bound"]["busbw_GBps"]
                close(float(t[col]), want, f"{where} column {col}", failures)
    if avg is None or not busbws:
        failures.append("no '# Avg bus bandwidth' footer or no busbw")
    else:
        mean = sum(busbws) / len(busbws)
        if not math.isclose(avg, mean, rel_tol=1e-4, abs_tol=1e-6):
            failures.append(f"footer {avg} != mean busbw {mean}")
        if not math.isclose(data["avg_busbw_GBps"], mean, rel_tol=1e-4,
                            abs_tol=1e-6):
            failures.append(f"JSON avg {data['avg_busbw_GBps']} != {mean}")
    if data["out_of_bounds"] != 0:
        failures.append("JSON out_of_bounds != 0")
    for f in failures:
        print("FAILED:", f)
    print(f"{len(rows)} rows checked, {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
