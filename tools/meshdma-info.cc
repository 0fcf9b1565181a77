// meshdma-info: what meshdma sees on this machine and in this launch.
//
//   meshdma-info [--json] [--devices-per-process N] [--force-interhost] ...
//   mpirun -np 4 meshdma-info --json
//   meshdma-info --config [--json]
//
// Prints the build configuration, the host (cores, caches, memory), the
// launch (which rank and device sits on which host and core), the path each
// pair of devices uses, the runtime's effective settings with where each
// came from (default, environment or option), and warnings (devices sharing
// a core, heaps larger than memory). It starts a runtime exactly as a
// program would, so the settings are the ones a program would get. Under
// mpirun every rank takes part and rank 0 prints. `--config` prints the
// configuration table instead (every MESHDMA_* variable: type, default,
// range, the value set here, what it does) and starts no runtime. Exit status:
// 0 on success, 1 when the runtime cannot start, 2 for a bad command line.
#include <hwloc.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/config.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "meshdma/base/config.h"
#include "meshdma/base/env.h"
#include "meshdma/base/logging.h"
#include "meshdma/collectives/options.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/trace.h"
#include "meshdma/topology/host_topology.h"
#include "meshdma/topology/launch.h"
#include "tools/flags.h"
#include "tools/json.h"
#include "tools/runtime_flags.h"

ABSL_FLAG(bool, json, false, "print one JSON object instead of text");
ABSL_FLAG(bool, config, false,
          "print the configuration table (every MESHDMA_* variable: type, "
          "default, range, value here, what it does); starts no runtime");

namespace meshdma {
namespace {

const cli::Program kProgram = {
    .name = "meshdma-info",
    .synopsis = "[flags]   (also: mpirun -np N meshdma-info)",
    .summary =
        "Prints the build, the host (cores, caches, memory), the launch, the "
        "path\nbetween every pair of devices, the runtime's effective "
        "settings and where each\ncame from, and warnings. Under mpirun rank "
        "0 prints for every rank.",
    .aliases = {},
    .footer = cli::kRuntimeFlagsFooter};

using cli::JsonString;

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

struct Setting {
  std::string name;
  std::string value;
  std::string source;  // "default", "environment", "option"
  std::string where;   // The variable or flag, for the first two.
};

// Where a setting came from: the flag if given, else the variable if set.
Setting Resolve(std::string name, std::string value, absl::string_view flag,
                const char* env) {
  Setting s{std::move(name), std::move(value), "default", ""};
  if (!flag.empty() && cli::Given(flag)) {
    s.source = "option";
    s.where = absl::StrCat("--", absl::StrReplaceAll(flag, {{"_", "-"}}));
  } else if (env != nullptr && Env(env) != nullptr) {
    s.source = "environment";
    s.where = absl::StrCat(env, "=", Env(env));
  }
  return s;
}

struct Cache {
  int level;
  std::string type;
  int64_t size_bytes;
  int count;
};

// Data and unified caches by level, from hwloc (the instruction caches are
// left out). Empty when hwloc cannot load the topology.
std::vector<Cache> Caches() {
  std::vector<Cache> out;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return out;
  if (hwloc_topology_load(topo) == 0) {
    const hwloc_obj_type_t types[] = {HWLOC_OBJ_L1CACHE, HWLOC_OBJ_L2CACHE,
                                      HWLOC_OBJ_L3CACHE, HWLOC_OBJ_L4CACHE};
    for (int i = 0; i < 4; ++i) {
      const int n = hwloc_get_nbobjs_by_type(topo, types[i]);
      if (n <= 0) continue;
      hwloc_obj_t obj = hwloc_get_obj_by_type(topo, types[i], 0);
      out.push_back({i + 1,
                     obj->attr->cache.type == HWLOC_OBJ_CACHE_UNIFIED
                         ? "unified"
                         : "data",
                     static_cast<int64_t>(obj->attr->cache.size), n});
    }
  }
  hwloc_topology_destroy(topo);
  return out;
}

int64_t PhysicalMemoryBytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
}

std::string HostName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

std::string MpiLibrary() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string mpi(version, len);
  while (!mpi.empty() && (mpi.back() == '\n' || mpi.back() == '\0')) {
    mpi.pop_back();
  }
  // Open MPI appends ", package: ..., ident: ..., repo rev: ..."; the first
  // clause names the library and its version.
  return mpi.substr(0, mpi.find(','));
}

// The path from device `a` to device `b`, as the runtime chose it: a copy
// within the process, shared memory within a host, and between hosts
// `remote` ("tcp": meshdma's own connections, or "mpi").
std::string Path(const Launch& launch, const std::string& remote, int a,
                 int b) {
  const GlobalDevice& x = launch.devices()[a];
  const GlobalDevice& y = launch.devices()[b];
  if (x.rank == y.rank) return "direct";
  return launch.SameHost(x.rank, y.rank) ? "shm" : remote;
}

struct Report {
  std::vector<std::pair<std::string, std::string>> build;
  std::string topology_text;
  const HostTopology* topology;
  const Launch* launch;
  std::string remote_transport;  // Runtime::remote_transport().
  std::vector<Cache> caches;
  int64_t memory_bytes;
  std::vector<Setting> settings;
  std::vector<std::string> warnings;
  bool under_mpi;
};

std::vector<std::string> Warnings(const Runtime& rt) {
  std::vector<std::string> out;
  const Launch& launch = rt.launch();
  // Devices pinned to one core of one host share it in time.
  std::map<std::pair<int, int>, std::vector<int>> by_core;
  std::map<int, int> devices_on_host;
  for (const GlobalDevice& d : launch.devices()) {
    ++devices_on_host[d.host_index];
    if (d.core >= 0) by_core[{d.host_index, d.core}].push_back(d.global_index);
  }
  for (const auto& [key, devices] : by_core) {
    if (devices.size() < 2) continue;
    const GlobalDevice& first = launch.devices()[devices.front()];
    out.push_back(absl::StrCat(
        "oversubscribed: devices ", absl::StrJoin(devices, ", "),
        " are pinned to core ", key.second, " of host ",
        launch.processes()[first.rank].hostname,
        "; they take turns on it, and waits that spin slow each other down"));
  }
  // The heaps of this host's devices, if they were all used.
  const int here =
      launch.devices()[launch.DevicesOfRank(launch.rank())[0]].host_index;
  const int64_t heaps = rt.heap_bytes() * devices_on_host[here];
  const int64_t memory = PhysicalMemoryBytes();
  if (memory > 0 && heaps > memory) {
    out.push_back(absl::StrCat(
        "heap: ", devices_on_host[here], " devices x ",
        cli::FormatBytes(rt.heap_bytes()),
        " of symmetric heap = ", cli::FormatBytes(heaps),
        " on this host, more than its ", cli::FormatBytes(memory),
        " of memory (reserved lazily: fine until the pages are used)"));
  }
  if (devices_on_host[here] > rt.topology().num_cores()) {
    out.push_back(absl::StrCat("this host runs ", devices_on_host[here],
                               " devices on ", rt.topology().num_cores(),
                               " cores"));
  }
  return out;
}

// The pieces' limit towards the other processes of this machine and of
// other machines, as this process uses it.
std::string PiecedBytes(const Runtime& rt) {
  if (rt.remote_transport() == "tcp") {
    return "unused (puts between hosts take the TCP transport)";
  }
  const Launch& launch = rt.launch();
  const std::string& mine = launch.processes()[launch.rank()].hostname;
  std::set<std::string> same, other;
  for (int r = 0; r < launch.num_processes(); ++r) {
    if (r == launch.rank()) continue;
    (launch.processes()[r].hostname == mine ? same : other)
        .insert(absl::StrCat(rt.mpi_pieced_bytes(r), " in pieces of ",
                             rt.mpi_piece_bytes(r)));
  }
  std::vector<std::string> parts;
  if (!same.empty()) {
    parts.push_back(
        absl::StrCat(absl::StrJoin(same, "/"), " to this machine's processes"));
  }
  if (!other.empty()) {
    parts.push_back(absl::StrCat(absl::StrJoin(other, "/"),
                                 " to other machines' processes"));
  }
  if (parts.empty()) return "unused (one process)";
  return absl::StrJoin(parts, ", ");
}

std::vector<Setting> Settings(const Runtime& rt) {
  const Launch& launch = rt.launch();
  const RuntimeOptions defaults;
  std::vector<Setting> s;
  s.push_back(
      Resolve("devices_per_process",
              absl::StrCat(launch.processes()[launch.rank()].num_devices),
              "devices_per_process", kDevicesPerProcessEnv));
  bool forced = false;
  for (const ProcessInfo& p : launch.processes()) {
    forced |= p.host_key != p.hostname;
  }
  s.push_back(Resolve("force_interhost", forced ? "true" : "false",
                      "force_interhost", kForceInterhostEnv));
  s.push_back(Resolve("dma_mode",
                      rt.dma_mode() == DmaMode::kAsync ? "async" : "eager",
                      "dma_mode", kDmaModeEnv));
  s.push_back(Resolve("heap_bytes", absl::StrCat(rt.heap_bytes()), "heap_bytes",
                      kHeapBytesEnv));
  s.push_back(Resolve("wait_timeout_s",
                      absl::StrCat(absl::ToDoubleSeconds(rt.wait_timeout())),
                      "wait_timeout_s", kWaitTimeoutEnv));
  const char* spin = Env(kSpinNsEnv);
  s.push_back(Resolve("spin_ns", spin ? spin : absl::StrCat(defaults.spin_ns),
                      "", kSpinNsEnv));
  const char* remote_spin = Env(kRemoteSpinNsEnv);
  s.push_back(
      Resolve("remote_spin_ns",
              remote_spin ? remote_spin : absl::StrCat(defaults.remote_spin_ns),
              "", kRemoteSpinNsEnv));
  s.push_back(
      Resolve("copy_threads",
              rt.dma_mode() == DmaMode::kAsync
                  ? absl::StrCat(std::max(1, rt.num_local_devices() / 2))
                  : "0 (eager mode)",
              "", nullptr));
  const std::string remote = rt.remote_transport();
  s.push_back(Resolve("remote_transport",
                      remote.empty() ? "none (one host)" : remote, "",
                      kRemoteTransportEnv));
  const std::string congestion = rt.tcp_congestion();
  s.push_back(
      Resolve("tcp_congestion",
              congestion.empty() ? "unused (no TCP transport)" : congestion, "",
              kTcpCongestionEnv));
  s.push_back(
      Resolve("mpi_pieced_bytes", PiecedBytes(rt), "", kMpiPiecedBytesEnv));
  const char* trace = Env(kTraceEnv);
  s.push_back(Resolve("trace", trace ? trace : "off", "", kTraceEnv));
  const LogConfig& log = GetLogConfig();
  s.push_back(Resolve("debug", std::string(LogLevelName(log.level)), "",
                      config::kDebug.name));
  s.push_back(
      Resolve("debug_subsys",
              base_internal::EnvString(config::kDebugSubsys).value_or("ALL"),
              "", config::kDebugSubsys.name));
  s.push_back(Resolve("debug_file", log.file.empty() ? "stderr" : log.file, "",
                      config::kDebugFile.name));
  return s;
}

std::string Text(const Report& r) {
  std::string out = "meshdma\n";
  for (const auto& [k, v] : r.build) {
    absl::StrAppend(&out, absl::StrFormat("  %-11s %s\n", k + ":", v));
  }
  absl::StrAppend(&out, "\nhost ", HostName(), "\n", r.topology_text);
  absl::StrAppend(&out, "  memory: ", cli::FormatBytes(r.memory_bytes), "\n");
  for (const Cache& c : r.caches) {
    absl::StrAppend(&out, "  L", c.level, " ", c.type,
                    " cache: ", cli::FormatBytes(c.size_bytes), " x ", c.count,
                    "\n");
  }
  const Launch& launch = *r.launch;
  absl::StrAppend(&out, "\n", launch.Describe());
  if (!r.under_mpi)
    absl::StrAppend(&out, "  (not under mpirun: this process alone)\n");
  const int n = launch.num_devices();
  absl::StrAppend(&out,
                  "\npaths (row: from device, column: to device; "
                  "D direct copy in the process, S shared memory, T TCP, "
                  "M MPI):\n");
  absl::StrAppend(&out, "      ");
  for (int b = 0; b < n; ++b) absl::StrAppend(&out, absl::StrFormat("%4d", b));
  absl::StrAppend(&out, "\n");
  for (int a = 0; a < n; ++a) {
    absl::StrAppend(&out, absl::StrFormat("  %4d", a));
    for (int b = 0; b < n; ++b) {
      const std::string p = Path(launch, r.remote_transport, a, b);
      absl::StrAppend(&out, absl::StrFormat("%4s", a == b          ? "-"
                                                   : p == "direct" ? "D"
                                                   : p == "shm"    ? "S"
                                                   : p == "tcp"    ? "T"
                                                                   : "M"));
    }
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "\nsettings (rank 0's; source):\n");
  for (const Setting& s : r.settings) {
    absl::StrAppend(
        &out, absl::StrFormat("  %-20s %-24s %s%s%s\n", s.name, s.value,
                              s.source, s.where.empty() ? "" : ": ", s.where));
  }
  absl::StrAppend(&out,
                  "\ncollective paths (thresholds, then the rules each "
                  "collective tries in order):\n");
  for (absl::string_view line :
       absl::StrSplit(CollectivePathRules(), '\n', absl::SkipEmpty())) {
    absl::StrAppend(&out, "  ", line, "\n");
  }
  if (!r.warnings.empty()) {
    absl::StrAppend(&out, "\n");
    for (const std::string& w : r.warnings) {
      absl::StrAppend(&out, "warning: ", w, "\n");
    }
  }
  return out;
}

std::string Json(const Report& r) {
  const Launch& launch = *r.launch;
  std::vector<std::string> parts;
  std::vector<std::string> build;
  for (const auto& [k, v] : r.build) {
    build.push_back(absl::StrCat(JsonString(k), ":", JsonString(v)));
  }
  parts.push_back(
      absl::StrCat("\"meshdma\":{", absl::StrJoin(build, ","), "}"));
  std::vector<std::string> caches;
  for (const Cache& c : r.caches) {
    caches.push_back(absl::StrFormat(
        R"({"level":%d,"type":"%s","size_bytes":%d,"count":%d})", c.level,
        c.type, c.size_bytes, c.count));
  }
  const HostTopology& t = *r.topology;
  parts.push_back(absl::StrFormat(
      R"("host":{"hostname":%s,"packages":%d,"numa_nodes":%d,"l3_domains":%d,)"
      R"("cores":%d,"pus":%d,"memory_bytes":%d,"caches":[%s]})",
      JsonString(HostName()), t.num_packages(), t.num_numa_nodes(),
      t.num_l3_domains(), t.num_cores(), t.num_pus(), r.memory_bytes,
      absl::StrJoin(caches, ",")));
  std::vector<std::string> devices;
  for (const GlobalDevice& d : launch.devices()) {
    devices.push_back(absl::StrFormat(
        R"({"device":%d,"rank":%d,"local":%d,"host":%s,"host_index":%d,"core":%d})",
        d.global_index, d.rank, d.local_index,
        JsonString(launch.processes()[d.rank].hostname), d.host_index, d.core));
  }
  parts.push_back(absl::StrFormat(
      R"("launch":{"under_mpirun":%s,"processes":%d,"hosts":%d,"devices":[%s]})",
      r.under_mpi ? "true" : "false", launch.num_processes(),
      launch.num_hosts(), absl::StrJoin(devices, ",")));
  std::vector<std::string> rows;
  for (int a = 0; a < launch.num_devices(); ++a) {
    std::vector<std::string> row;
    for (int b = 0; b < launch.num_devices(); ++b) {
      row.push_back(
          JsonString(a == b ? "self" : Path(launch, r.remote_transport, a, b)));
    }
    rows.push_back(absl::StrCat("[", absl::StrJoin(row, ","), "]"));
  }
  parts.push_back(absl::StrCat("\"paths\":[", absl::StrJoin(rows, ","), "]"));
  std::vector<std::string> settings;
  for (const Setting& s : r.settings) {
    settings.push_back(absl::StrFormat(
        R"(%s:{"value":%s,"source":"%s","from":%s})", JsonString(s.name),
        JsonString(s.value), s.source, JsonString(s.where)));
  }
  parts.push_back(
      absl::StrCat("\"settings\":{", absl::StrJoin(settings, ","), "}"));
  std::vector<std::string> warnings;
  for (const std::string& w : r.warnings) warnings.push_back(JsonString(w));
  parts.push_back(
      absl::StrCat("\"warnings\":[", absl::StrJoin(warnings, ","), "]"));
  std::vector<std::string> rules;
  for (absl::string_view line :
       absl::StrSplit(CollectivePathRules(), '\n', absl::SkipEmpty())) {
    rules.push_back(JsonString(line));
  }
  parts.push_back(absl::StrCat("\"collective_path_rules\":[",
                               absl::StrJoin(rules, ","), "]"));
  return absl::StrCat("{", absl::StrJoin(parts, ",\n"), "}\n");
}

// The configuration table (base/config.h), with each variable's value in
// this process's environment ("" when unset).
std::string ConfigText() {
  std::string out =
      "configuration (variable, type, default, range; set here)\n";
  for (const config::Variable* v : config::AllVariables()) {
    const std::string range = config::RangeText(*v);
    absl::StrAppend(&out, "  ", v->name, " (", config::TypeName(v->type),
                    "): default ", v->default_value,
                    range.empty() ? "" : absl::StrCat("; range ", range),
                    base_internal::EnvString(*v).has_value()
                        ? absl::StrCat("; set: ", *base_internal::EnvString(*v))
                        : "",
                    "\n      ", v->doc, "\n");
  }
  return out;
}

std::string ConfigJson() {
  std::vector<std::string> rows;
  for (const config::Variable* v : config::AllVariables()) {
    rows.push_back(absl::StrFormat(
        R"({"name":%s,"type":%s,"default":%s,"range":%s,"value":%s,"doc":%s})",
        JsonString(v->name), JsonString(config::TypeName(v->type)),
        JsonString(v->default_value), JsonString(config::RangeText(*v)),
        JsonString(base_internal::EnvString(*v).value_or("")),
        JsonString(v->doc)));
  }
  return absl::StrCat("{\"configuration\":[", absl::StrJoin(rows, ",\n"),
                      "]}\n");
}

int Main(int argc, char** argv) {
  RuntimeOptions options = cli::ParseRuntimeOptionsOrExit(kProgram, argc, argv);
  if (absl::GetFlag(FLAGS_config)) {
    const std::string out =
        absl::GetFlag(FLAGS_json) ? ConfigJson() : ConfigText();
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  options.trace_path = "";  // Report MESHDMA_TRACE; write no trace.
  options.pin_threads = false;
  absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::Create(options);
  if (!rt.ok()) {
    std::fprintf(stderr, "meshdma-info: rank %d: %s\n", cli::LauncherRank(),
                 std::string(rt.status().message()).c_str());
    return 1;
  }
  const Launch& launch = (*rt)->launch();
  if (launch.rank() == 0) {
    const std::string build_type = MESHDMA_BUILD_TYPE;
    const unsigned hwloc = hwloc_get_api_version();
    Report r;
    r.build = {
        {"version", MESHDMA_VERSION},
        {"compiler", MESHDMA_CXX_COMPILER},
        {"build type", build_type.empty() ? "none" : build_type},
        {"MPI", MpiLibrary()},
        {"hwloc API", absl::StrCat(hwloc >> 16, ".", (hwloc >> 8) & 0xff, ".",
                                   hwloc & 0xff)},
        {"abseil", absl::StrCat(ABSL_LTS_RELEASE_VERSION)},
    };
    r.topology = &(*rt)->topology();
    r.topology_text = r.topology->Describe();
    r.launch = &launch;
    r.remote_transport = (*rt)->remote_transport();
    r.caches = Caches();
    r.memory_bytes = PhysicalMemoryBytes();
    r.settings = Settings(**rt);
    r.warnings = Warnings(**rt);
    r.under_mpi = LaunchedByMpi();
    const std::string out = absl::GetFlag(FLAGS_json) ? Json(r) : Text(r);
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
  }
  absl::Status s = (*rt)->Shutdown();
  if (!s.ok()) {
    std::fprintf(stderr, "meshdma-info: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace meshdma

int main(int argc, char** argv) { return meshdma::Main(argc, argv); }
