#!/usr/bin/env python3
"""meshdma-info --json under mpirun: parsed, and checked against the launch.

  check_info_json.py MPIRUN... INFO

Runs the command three ways and checks, from Python's json module:
1. defaults: one process per rank, devices listed per rank, and the path of
   every pair by the rule (same process: direct; same host: shm; else mpi);
2. MESHDMA_FORCE_INTERHOST=1: every process its own host, every pair of
   processes on the MPI path, the setting's source the environment;
3. --devices-per-process 2 --heap-bytes <this machine's memory> with
   MESHDMA_DMA_MODE=eager: the sources option / environment, and warnings
   for the heap (2 x memory) and, when the host has fewer cores than
   devices, for oversubscription.
"""
import json
import os
import subprocess
import sys


def info(cmd, extra_args, env_extra):
    env = dict(os.environ)
    env.update(env_extra)
    r = subprocess.run(cmd + ["--json"] + extra_args, capture_output=True,
                       text=True, timeout=300, env=env)
    if r.returncode != 0:
        raise SystemExit(f"exit {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


def mem_total_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no MemTotal")


def main():
    cmd = sys.argv[1:]
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    def check_paths(d, forced, remote="mpi"):
        devs = d["launch"]["devices"]
        paths = d["paths"]
        expect(len(paths) == len(devs), "one row of paths per device")
        for a in devs:
            for b in devs:
                got = paths[a["device"]][b["device"]]
                if a["device"] == b["device"]:
                    want = "self"
                elif a["rank"] == b["rank"]:
                    want = "direct"
                elif forced:
                    want = remote
                else:
                    want = "shm" if a["host"] == b["host"] else remote
                expect(got == want,
                       f"path {a['device']}->{b['device']}: {got}, want {want}")

    d = info(cmd, [], {})
    expect(d["launch"]["under_mpirun"] is True, "under_mpirun")
    expect(d["launch"]["processes"] == 2, "2 processes")
    ranks = sorted({x["rank"] for x in d["launch"]["devices"]})
    expect(ranks == [0, 1], f"devices of ranks 0 and 1: {ranks}")
    expect([x["device"] for x in d["launch"]["devices"]] ==
           list(range(len(d["launch"]["devices"]))), "devices in order")
    check_paths(d, forced=False)
    expect(d["settings"]["force_interhost"]["value"] == "false",
           "force_interhost false by default")
    expect(d["settings"]["dma_mode"]["source"] == "default",
           "dma_mode from the default")
    expect(d["host"]["cores"] >= 1 and d["host"]["memory_bytes"] > 0,
           "host cores and memory")
    expect(any(c["level"] >= 2 for c in d["host"]["caches"]) or
           not d["host"]["caches"], "cache levels")

    # Forced hosts on one machine whose MPI shares memory between them: the
    # automatic remote transport is MPI's; told, meshdma's own TCP.
    d = info(cmd, [], {"MESHDMA_FORCE_INTERHOST": "1"})
    expect(d["launch"]["hosts"] == 2, "forced: 2 hosts")
    check_paths(d, forced=True, remote="mpi")
    s = d["settings"]["force_interhost"]
    expect(s["value"] == "true" and s["source"] == "environment",
           f"forced: force_interhost {s}")
    expect(d["settings"]["remote_transport"]["value"] == "mpi",
           f"forced: remote_transport {d['settings']['remote_transport']}")
    expect(d["settings"]["tcp_congestion"]["value"].startswith("unused"),
           f"forced, MPI: tcp_congestion {d['settings']['tcp_congestion']}")
    d = info(cmd, [], {"MESHDMA_FORCE_INTERHOST": "1",
                       "MESHDMA_REMOTE_TRANSPORT": "tcp"})
    check_paths(d, forced=True, remote="tcp")
    s = d["settings"]["remote_transport"]
    expect(s["value"] == "tcp" and s["source"] == "environment",
           f"told: remote_transport {s}")
    # meshdma's TCP connections run CUBIC unless told otherwise (or the
    # kernel's default, where it refuses CUBIC); told, what was asked.
    s = d["settings"]["tcp_congestion"]
    with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
        offered = f.read().split()
    expect(s["value"] in offered and s["source"] == "default",
           f"told tcp: tcp_congestion {s} (offered: {offered})")
    d = info(cmd, [], {"MESHDMA_FORCE_INTERHOST": "1",
                       "MESHDMA_REMOTE_TRANSPORT": "tcp",
                       "MESHDMA_TCP_CONGESTION": "reno"})
    s = d["settings"]["tcp_congestion"]
    expect(s["value"] == "reno" and s["source"] == "environment",
           f"told reno: tcp_congestion {s}")

    heap = (mem_total_bytes() + (1 << 20) - 1) >> 20 << 20
    d = info(cmd, ["--devices-per-process", "2", "--heap-bytes",
                   f"{heap >> 20}M"], {"MESHDMA_DMA_MODE": "eager"})
    s = d["settings"]
    expect(len(d["launch"]["devices"]) == 4, "2 x 2 devices")
    expect(s["devices_per_process"] == {"value": "2", "source": "option",
                                        "from": "--devices-per-process"},
           f"devices_per_process {s['devices_per_process']}")
    expect(s["heap_bytes"]["value"] == str(heap) and
           s["heap_bytes"]["source"] == "option", f"heap {s['heap_bytes']}")
    expect(s["dma_mode"]["value"] == "eager" and
           s["dma_mode"]["source"] == "environment", f"dma {s['dma_mode']}")
    check_paths(d, forced=False)
    w = " ".join(d["warnings"])
    expect("heap" in w, f"a heap warning: {d['warnings']}")
    if d["host"]["cores"] < 4:
        expect("oversubscribed" in w, f"an oversubscription warning: {w}")
    else:
        expect("oversubscribed" not in w, f"no oversubscription: {w}")

    for f in failures:
        print("FAILED:", f)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
