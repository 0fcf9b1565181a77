// meshdma-info: what meshdma sees on this machine and in this launch.
//
//   meshdma-info [--devices-per-process N] [--force-interhost]
//   mpirun -np 4 meshdma-info
//
// Prints the build configuration, the host topology and the launch: which
// rank and device sits on which host and core. Under mpirun every rank takes
// part in the discovery and rank 0 prints; the others print nothing unless
// they fail. Exit status: 0 on success, 1 when discovery fails, 2 for a bad
// command line.
#include <hwloc.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "absl/base/config.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "meshdma/topology/host_topology.h"
#include "meshdma/dma/transport/mpi/mpi_process_group.h"
#include "meshdma/topology/launch.h"

namespace {

constexpr char kUsage[] =
    "usage: meshdma-info [--devices-per-process N] [--force-interhost] "
    "[--help]\n"
    "  --devices-per-process N  devices (threads) per process, 1..1024\n"
    "                           (default: $MESHDMA_DEVICES_PER_PROCESS, else\n"
    "                           the host's cores divided among its "
    "processes)\n"
    "  --force-interhost        treat every process as its own host\n"
    "                           (default: $MESHDMA_FORCE_INTERHOST)\n"
    "Run under mpirun to see every rank's devices.\n";

struct Flags {
  meshdma::LaunchOptions options;
  bool help = false;
};

// Parses the command line. On a bad flag returns false, after printing a
// message and the usage when `report` is set.
bool ParseFlags(int argc, char** argv, bool report, Flags* flags) {
  auto fail = [&](const std::string& message) {
    if (report)
      std::fprintf(stderr, "meshdma-info: %s\n%s", message.c_str(), kUsage);
    return false;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      flags->help = true;
    } else if (arg == "--force-interhost") {
      flags->options.force_interhost = true;
    } else if (arg == "--devices-per-process" ||
               arg.rfind("--devices-per-process=", 0) == 0) {
      std::string value;
      if (arg == "--devices-per-process") {
        if (i + 1 >= argc) return fail(arg + " needs a value");
        value = argv[++i];
      } else {
        value = arg.substr(std::strlen("--devices-per-process="));
      }
      int n = 0;
      if (!absl::SimpleAtoi(value, &n) || n < 1 || n > 1024) {
        return fail("--devices-per-process '" + value +
                    "' is not an integer in [1, 1024]");
      }
      flags->options.devices_per_process = n;
    } else {
      return fail("unknown flag '" + arg + "'");
    }
  }
  return true;
}

std::string BuildConfiguration() {
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  // Allowed before MPI_Init (MPI 3.0).
  MPI_Get_library_version(mpi_version, &len);
  std::string mpi(mpi_version, len);
  while (!mpi.empty() && (mpi.back() == '\n' || mpi.back() == '\0')) {
    mpi.pop_back();
  }
  const unsigned hwloc = hwloc_get_api_version();
  const std::string build_type = MESHDMA_BUILD_TYPE;
  return absl::StrCat(
      "meshdma ", MESHDMA_VERSION, "\n", "  compiler:   ", MESHDMA_CXX_COMPILER,
      "\n", "  build type: ", build_type.empty() ? "none" : build_type, "\n",
      "  MPI:        ", mpi, "\n", "  hwloc API:  ", hwloc >> 16, ".",
      (hwloc >> 8) & 0xff, ".", hwloc & 0xff, "\n",
      "  abseil:     ", ABSL_LTS_RELEASE_VERSION, "\n");
}

}  // namespace

int main(int argc, char** argv) {
  const bool under_mpi = meshdma::LaunchedByMpi();
  if (under_mpi) MPI_Init(&argc, &argv);
  int rank = 0;
  if (under_mpi) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto finish = [&](int code) {
    if (under_mpi) MPI_Finalize();
    return code;
  };

  // Every rank parses the same command line, so all of them agree on
  // whether to go on; only rank 0 reports a bad flag.
  Flags flags;
  if (!ParseFlags(argc, argv, /*report=*/rank == 0, &flags)) return finish(2);
  if (flags.help) {
    if (rank == 0) std::fputs(kUsage, stdout);
    return finish(0);
  }

  absl::StatusOr<meshdma::HostTopology> topology =
      meshdma::HostTopology::Discover();
  if (!topology.ok()) {
    std::fprintf(stderr, "meshdma-info: rank %d: %s\n", rank,
                 std::string(topology.status().message()).c_str());
    return finish(1);
  }
  std::unique_ptr<meshdma::ProcessGroup> processes;
  if (under_mpi) {
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    processes = std::make_unique<meshdma::dma_internal::MpiProcessGroup>(
        comm, /*owns_mpi=*/false);
  } else {
    processes = meshdma::MakeSingleProcessGroup();
  }
  absl::StatusOr<meshdma::Launch> launch =
      meshdma::Launch::Discover(*topology, flags.options, *processes);
  processes.reset();
  if (!launch.ok()) {
    std::fprintf(stderr, "meshdma-info: rank %d: %s\n", rank,
                 std::string(launch.status().message()).c_str());
    return finish(1);
  }
  if (rank == 0) {
    std::printf("%s\n%s\n%s", BuildConfiguration().c_str(),
                topology->Describe().c_str(), launch->Describe().c_str());
    if (!under_mpi) {
      std::printf("(not under mpirun: this process alone)\n");
    }
    std::fflush(stdout);
  }
  return finish(0);
}
