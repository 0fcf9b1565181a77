#!/usr/bin/env python3
"""Fails when the library breaks its layering (docs/architecture.md).

Checks every file under meshdma/:
  1. An include of another meshdma folder names a layer at or below its own:
     base < topology < dma < kernels < sharding < collectives. Inside a layer,
     kernels/ops may use the kernels engine (not the reverse) and
     collectives/fused may use the collectives (not the reverse).
  2. Only files under meshdma/dma/transport/mpi/ include <mpi.h>.
  3. Transports are leaves: files under meshdma/dma/transport/ include nothing
     of dma/ outside dma/transport/ except the op record's own dependencies
     (dma/internal/copy_plan.h, dma/internal/semaphore_cell.h,
     dma/observer.h, dma/semaphore.h).
  4. Installed (public) headers include no internal header of another layer,
     and none of dma/internal or dma/transport.
  5. No file of the repository refers outside it (to a sibling folder of
     the checkout, or to notes that are not in it).
  6. The planner sits above the collectives' algorithms: nothing under
     meshdma/collectives/internal/ but the planner itself includes
     collectives/internal/plan.h, and the planner includes no entry point
     (a collective's .cc runs the plan, the algorithms run the steps); the
     plan cache (plan_cache.h) sits with the planner.
  7. The channel's protocols sit below its interface: the protocol files
     (collectives/internal/channel_protocol.h, channel_dma.*,
     channel_stores.*) include nothing of channel.h, plan.h or an entry
     point, and nothing but the channel itself (channel.cc) includes a
     protocol's implementation (channel_dma.h, channel_stores.h).
  8. The device's heap sits below the device: dma/internal/device_heap.*
     include nothing of dma/internal/ but the allocation log and the
     semaphore cell (allocation_log.h, semaphore_cell.h), and nothing of
     dma/check/ or dma/transport/; the device tells the race checker.
  9. The progress policy of the remote transports sits beside the transport
     interface, below every transport: dma/transport/progress_policy.*
     include nothing of dma/ but transport.h, so that it judges for TCP and
     MPI alike and no transport's own state leaks into it.
Usage: check_layering.py REPO_ROOT [PUBLIC_HEADER ...]
"""
import os
import re
import sys

LAYERS = ["base", "topology", "dma", "kernels", "sharding", "collectives"]
# Sub-layers: (folder, the folder it sits above within the same layer).
SUBLAYERS = {"kernels/ops": "kernels", "collectives/fused": "collectives"}
TRANSPORT_ALLOWED = {
    "meshdma/dma/internal/copy_plan.h",
    "meshdma/dma/internal/semaphore_cell.h",
    "meshdma/dma/observer.h",
    "meshdma/dma/semaphore.h",
}
PLANNER = "meshdma/collectives/internal/plan.h"
PLANNER_FILES = {PLANNER, "meshdma/collectives/internal/plan.cc",
                 "meshdma/collectives/internal/plan_cache.h",
                 "meshdma/collectives/internal/plan_cache.cc"}
_CI = "meshdma/collectives/internal/"
PROTOCOL_FILES = {_CI + "channel_protocol.h", _CI + "channel_dma.h",
                  _CI + "channel_dma.cc", _CI + "channel_stores.h",
                  _CI + "channel_stores.cc"}
PROTOCOL_IMPLEMENTATIONS = {_CI + "channel_dma.h", _CI + "channel_stores.h"}
CHANNEL_FILES = {_CI + "channel.h", _CI + "channel.cc"}
HEAP_FILES = {"meshdma/dma/internal/device_heap.h",
              "meshdma/dma/internal/device_heap.cc"}
HEAP_ALLOWED = {"meshdma/dma/internal/device_heap.h",
                "meshdma/dma/internal/allocation_log.h",
                "meshdma/dma/internal/semaphore_cell.h"}
PROGRESS_FILES = {"meshdma/dma/transport/progress_policy.h",
                  "meshdma/dma/transport/progress_policy.cc"}
PROGRESS_ALLOWED = {"meshdma/dma/transport/progress_policy.h",
                    "meshdma/dma/transport/transport.h"}
# Spelled in pieces so that this file does not match itself.
OUTSIDE = re.compile(r"\.\./" + "shared|" + "shared" + "/design|" +
                     "design" + " notes")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)


def layer_of(path):
    parts = path.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "meshdma" else None


def sublayer_rank(path):
    """0 for a layer's base folder, 1 for its sub-layer (ops/, fused/)."""
    for sub in SUBLAYERS:
        if path.startswith("meshdma/" + sub + "/"):
            return 1
    return 0


def main():
    root = sys.argv[1]
    public = set(sys.argv[2:])
    errors = []
    for dirpath, _, files in os.walk(os.path.join(root, "meshdma")):
        for name in files:
            if not name.endswith((".h", ".cc")):
                continue
            full = os.path.join(dirpath, name)
            path = os.path.relpath(full, root)
            text = open(full, encoding="utf-8").read()
            me = layer_of(path)
            for inc in INCLUDE.findall(text):
                if inc == "mpi.h" and not path.startswith(
                        "meshdma/dma/transport/mpi/"):
                    errors.append(f"{path}: includes <mpi.h>; only "
                                  "meshdma/dma/transport/mpi/ may")
                if not inc.startswith("meshdma/"):
                    continue
                other = layer_of(inc)
                if other is None or me is None:
                    continue
                if LAYERS.index(other) > LAYERS.index(me):
                    errors.append(f"{path}: includes {inc}, a higher layer "
                                  f"({other} above {me})")
                elif other == me and sublayer_rank(inc) > sublayer_rank(path):
                    errors.append(f"{path}: includes {inc}, which sits above "
                                  "it in the same layer")
                if (path.startswith("meshdma/dma/transport/") and
                        inc.startswith("meshdma/dma/") and
                        not inc.startswith("meshdma/dma/transport/") and
                        inc not in TRANSPORT_ALLOWED):
                    errors.append(f"{path}: a transport includes {inc}; "
                                  "transports reach the runtime only "
                                  "through TransportHost (transport.h)")
                if (inc == PLANNER and
                        path.startswith("meshdma/collectives/internal/") and
                        path not in PLANNER_FILES):
                    errors.append(f"{path}: includes the planner {inc}; "
                                  "algorithms sit below the plan")
                if (path in PLANNER_FILES and
                        re.fullmatch(r"meshdma/collectives/[a-z_]+\.h", inc)
                        and inc not in ("meshdma/collectives/options.h",
                                        "meshdma/collectives/all_reduce.h")):
                    errors.append(f"{path}: the planner includes the entry "
                                  f"point {inc}")
                if path in PROTOCOL_FILES and (
                        inc in CHANNEL_FILES or inc == PLANNER or
                        re.fullmatch(r"meshdma/collectives/[a-z_]+\.h", inc)):
                    errors.append(f"{path}: a channel protocol includes "
                                  f"{inc}; protocols sit below the channel "
                                  "interface")
                if (inc in PROTOCOL_IMPLEMENTATIONS and
                        path not in CHANNEL_FILES and
                        path not in PROTOCOL_FILES):
                    errors.append(f"{path}: includes the channel protocol "
                                  f"{inc}; only the channel chooses and "
                                  "makes its protocols")
                if path in HEAP_FILES and inc not in HEAP_ALLOWED and (
                        inc.startswith("meshdma/dma/internal/") or
                        inc.startswith("meshdma/dma/check/") or
                        inc.startswith("meshdma/dma/transport/")):
                    errors.append(f"{path}: the device heap includes {inc}; "
                                  "it sits below the device, which tells "
                                  "the race checker and drains DMAs")
                if (path in PROGRESS_FILES and inc.startswith("meshdma/dma/")
                        and inc not in PROGRESS_ALLOWED):
                    errors.append(f"{path}: the progress policy includes "
                                  f"{inc}; it sits beside transport.h, "
                                  "below every transport")
                if path in public and (
                        inc.startswith("meshdma/dma/internal/") or
                        inc.startswith("meshdma/dma/transport/") or
                        ("/internal/" in inc and other != me)):
                    errors.append(f"{path}: a public header includes the "
                                  f"internal header {inc}")
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".git",) and
                   not d.startswith("build")]
        for name in files:
            full = os.path.join(dirpath, name)
            if not name.endswith((".h", ".cc", ".md", ".txt", ".cmake", ".sh",
                                  ".py", ".in", ".mlir", ".td")):
                continue
            try:
                text = open(full, encoding="utf-8").read()
            except UnicodeDecodeError:
                continue
            if os.path.abspath(full) == os.path.abspath(__file__):
                continue
            if OUTSIDE.search(text):
                errors.append(f"{os.path.relpath(full, root)}: refers outside "
                              "the repository")
    for e in errors:
        print("layering:", e)
    print(f"layering: {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
