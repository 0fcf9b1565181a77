#!/usr/bin/env python3
"""Checks a meshdma timeline trace against the launch that wrote it.

  check_trace.py TRACE.json DEVICES.txt

DEVICES.txt: one line "global_device rank core" per device. Checks:
- every device has a track named "device G (rank R, core C)";
- every flow id has one start and one end; the end sits on the device the
  start names (to_device), and for a DMA that is the destination of the DMA
  event (same id on the sending rank); each device receives flows from DMAs
  and from signals;
- waits carry the semaphore names the test gave (ring_recv, ping);
- each device's bytes-in-flight counter ends at 0;
- clocks: the stated error bound of every rank is at most 5 ms, and no flow
  ends earlier than it starts by more than the two ranks' bounds.
"""
import collections
import json
import sys

BOUND_NS = 5_000_000


def main():
    trace = json.load(open(sys.argv[1]))
    devices = {}
    for line in open(sys.argv[2]):
        g, r, c = map(int, line.split())
        devices[g] = (r, c)
    events = trace["traceEvents"]
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e["name"] == "thread_name"}
    for g, (r, c) in devices.items():
        core = f"core {c}" if c >= 0 else "unpinned"
        want = f"device {g} (rank {r}, {core})"
        expect(names.get((r, g)) == want,
               f"track of device {g}: {names.get((r, g))!r}, want {want!r}")

    dma_dst = {(e["pid"], e["id"]): e["args"]["dst_device"] for e in events
               if e.get("cat") == "dma" and e.get("ph") == "b"}
    starts, ends = {}, collections.defaultdict(list)
    for e in events:
        if e.get("cat") != "flow":
            continue
        if e["ph"] == "s":
            expect(e["id"] not in starts, f"flow {e['id']} starts twice")
            starts[e["id"]] = e
        elif e["ph"] == "f":
            ends[e["id"]].append(e)
    expect(len(starts) > 0, "flows present")
    bounds = trace["otherData"]["clock_error_bound_ns"]
    exact = trace["otherData"]["clock_offset_exact"]
    expect(len(exact) == len(bounds), "an exactness flag per rank")
    for r, b in enumerate(bounds):
        expect(0 <= b <= BOUND_NS, f"rank {r} clock bound {b} ns > 5 ms")
        # The suite's launches share one machine, hence one steady clock.
        expect(exact[r] == 1 and b == 0,
               f"rank {r} clock offset not exact ({exact[r]}, {b} ns)")
    received = collections.defaultdict(collections.Counter)
    for fid, s in starts.items():
        f = ends.get(fid, [])
        expect(len(f) == 1, f"flow {fid}: {len(f)} ends")
        if len(f) != 1:
            continue
        f = f[0]
        to = s["args"]["to_device"]
        expect(f["tid"] == to, f"flow {fid} ends on {f['tid']}, not {to}")
        expect(f["pid"] == devices[to][0], f"flow {fid} ends on the wrong rank")
        expect(s["tid"] in devices and s["pid"] == devices[s["tid"]][0],
               f"flow {fid} starts on an unknown track")
        if s["name"] == "dma":
            key = (s["pid"], s["args"]["dma"])
            expect(dma_dst.get(key) == f["tid"],
                   f"flow {fid}: DMA {key} went to {dma_dst.get(key)}, "
                   f"the arrow to {f['tid']}")
        received[f["tid"]][s["name"]] += 1
        slack_us = (bounds[s["pid"]] + bounds[f["pid"]]) / 1e3 + 0.01
        expect(f["ts"] >= s["ts"] - slack_us,
               f"flow {fid} (rank {s['pid']} -> {f['pid']}) goes back in "
               f"time: {s['ts']} -> {f['ts']} us, bound {slack_us} us")
    for g in devices:
        expect(received[g]["dma"] >= 3, f"device {g}: {received[g]} DMA flows")
        expect(received[g]["signal"] >= 1, f"device {g}: no signal flow")
    waits = [e["args"]["semaphore"] for e in events
             if e.get("cat") == "wait" and e.get("ph") == "B"]
    expect(any("'ring_recv'" in w for w in waits), "a wait on 'ring_recv'")
    expect(any("'ping'" in w for w in waits), "a wait on 'ping'")
    last = {}
    for e in sorted((e for e in events if e.get("ph") == "C"),
                    key=lambda e: e["ts"]):
        last[e["name"]] = e["args"]["bytes"]
    for g in devices:
        key = f"device {g} bytes in flight"
        expect(last.get(key) == 0, f"{key}: ends at {last.get(key)}")
    for f in failures:
        print("FAILED:", f)
    print(f"{len(starts)} flows, {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
