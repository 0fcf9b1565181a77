// meshdma-run FILE.mlir --kernel=NAME [options]: compiles a meshdma kernel
// (or, with --from-mesh, an upstream mesh program) with the JIT and runs it
// SPMD on every device of the launch: threads of this process, processes
// under mpirun, hosts (MESHDMA_FORCE_INTERHOST=1 makes every process a host
// of its own). Inputs are generated; with --reference the output is checked
// against the runtime's C++ collective on the same inputs.
//
//   --kernel=NAME        the kernel (a func.func with meshdma.kernel)
//   --mesh=x:4,y:2       mesh axes (default: x over all devices)
//   -D KEY=VALUE         replaces @KEY@ in the source; VALUE `devices` is the
//                        number of devices of the launch
//   --from-mesh          the source is an upstream mesh program on tensors
//   --expand             expand ppermute and all_gather over one axis into
//                        ring kernels of DMAs (meshdma-expand-collectives)
//   --in=0,1 --out=2     argument indices (default: all but the last are
//                        inputs, the last is the output)
//   --reference=SPEC     all_gather | all_gather_tiled | shift:K |
//                        shift_open:K | psum | pmax | pmin | pmean |
//                        psum_scatter | pmax_scatter | all_to_all:S:C
//   --axes=x,y           the reference's mesh axes (default: all)
//   --tolerance=T        relative tolerance of reductions (default 1e-5)
//   --iterations=N       also time N calls of the kernel and of the
//                        reference and print both (microseconds per call)
//   --help, -h           prints the usage and exits 0
//
// Exit status 0 when the kernel ran on every device and matched; 1 otherwise,
// with the error (MLIR diagnostics with locations for bad input); 2 for a bad
// command line.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "meshdma/collectives/collectives.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma_mlir/jit.h"

namespace {

struct Flags {
  std::string file, kernel, mesh, reference, axes;
  std::vector<std::pair<std::string, std::string>> defines;
  bool from_mesh = false;
  bool expand = false;
  std::vector<int> in, out;
  double tolerance = 1e-5;
  int iterations = 0;
};

constexpr const char* kSynopsis =
    "usage: meshdma-run FILE.mlir --kernel=NAME [--mesh=x:4] [-D KEY=VALUE] "
    "[--from-mesh] [--expand] [--in=0] [--out=1] [--reference=SPEC] "
    "[--axes=x] [--tolerance=T] [--iterations=N]\n";

constexpr const char* kFlags = R"(
Compiles a meshdma kernel with the JIT and runs it SPMD on every device of
the launch; with --reference the output is checked against the runtime's C++
collective on the same inputs.

  --kernel=NAME        the kernel (a func.func with meshdma.kernel)
  --mesh=x:4,y:2       mesh axes (default: x over all devices)
  -D KEY=VALUE         replaces @KEY@ in the source; VALUE `devices` is the
                       number of devices of the launch
  --from-mesh          the source is an upstream mesh program on tensors
  --expand             expand ppermute and all_gather over one axis into
                       ring kernels of DMAs (meshdma-expand-collectives)
  --in=0,1 --out=2     argument indices (default: all but the last are
                       inputs, the last is the output)
  --reference=SPEC     all_gather | all_gather_tiled | shift:K |
                       shift_open:K | psum | pmax | pmin | pmean |
                       psum_scatter | pmax_scatter | all_to_all:S:C
  --axes=x,y           the reference's mesh axes (default: all)
  --tolerance=T        relative tolerance of reductions (default 1e-5)
  --iterations=N       also time N calls of the kernel and of the
                       reference and print both (microseconds per call)
  --help, -h           this text

Exit status 0 when the kernel ran on every device and matched; 1 otherwise;
2 for a bad command line.
)";

// A bad command line: the error and the synopsis on stderr, exit status 2.
[[noreturn]] void Usage(const std::string& error) {
  std::cerr << "meshdma-run: " << error << "\n" << kSynopsis;
  std::exit(2);
}

std::vector<int> Ints(const std::string& s) {
  std::vector<int> out;
  for (absl::string_view p : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int v;
    if (!absl::SimpleAtoi(p, &v)) Usage("bad index list '" + s + "'");
    out.push_back(v);
  }
  return out;
}

Flags Parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> std::optional<std::string> {
      std::string p = std::string("--") + name + "=";
      if (a.rfind(p, 0) == 0) return a.substr(p.size());
      return std::nullopt;
    };
    if (a == "--help" || a == "-h" || a == "-help") {
      std::cout << kSynopsis << kFlags;
      std::exit(0);
    }
    if (a == "-D") {
      if (++i >= argc) Usage("-D needs KEY=VALUE");
      std::string kv = argv[i];
      size_t eq = kv.find('=');
      if (eq == std::string::npos) Usage("-D needs KEY=VALUE");
      f.defines.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    } else if (a == "--from-mesh") {
      f.from_mesh = true;
    } else if (a == "--expand") {
      f.expand = true;
    } else if (auto v = value("kernel")) {
      f.kernel = *v;
    } else if (auto v = value("mesh")) {
      f.mesh = *v;
    } else if (auto v = value("in")) {
      f.in = Ints(*v);
    } else if (auto v = value("out")) {
      f.out = Ints(*v);
    } else if (auto v = value("reference")) {
      f.reference = *v;
    } else if (auto v = value("axes")) {
      f.axes = *v;
    } else if (auto v = value("tolerance")) {
      if (!absl::SimpleAtod(*v, &f.tolerance)) Usage("bad --tolerance");
    } else if (auto v = value("iterations")) {
      if (!absl::SimpleAtoi(*v, &f.iterations) || f.iterations < 0)
        Usage("bad --iterations");
    } else if (a.rfind("-", 0) == 0) {
      Usage("unknown flag " + a);
    } else if (f.file.empty()) {
      f.file = a;
    } else {
      Usage("more than one input file");
    }
  }
  if (f.file.empty()) Usage("no input file");
  if (f.kernel.empty()) Usage("--kernel is required");
  return f;
}

// The generated input: element i of device d.
double InputValue(meshdma::DType t, int d, int64_t i) {
  switch (t) {
    case meshdma::DType::kU8:
      return static_cast<double>((d * 7 + i) % 251);
    case meshdma::DType::kI32:
    case meshdma::DType::kI64:
      return static_cast<double>(d * 100000 + i);
    default:
      return (d + 1) + static_cast<double>(i % 1000) * 0.001;
  }
}

void Fill(const meshdma::ArrayRef& a, int d) {
  int64_t n = 1;
  for (int64_t s : a.shape()) n *= s;
  std::byte* p = a.data();
  for (int64_t i = 0; i < n; ++i) {
    double v = InputValue(a.dtype(), d, i);
    switch (a.dtype()) {
      case meshdma::DType::kU8:
        reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
        break;
      case meshdma::DType::kI32:
        reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
        break;
      case meshdma::DType::kI64:
        reinterpret_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
        break;
      case meshdma::DType::kF32:
        reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
        break;
      case meshdma::DType::kF64:
        reinterpret_cast<double*>(p)[i] = v;
        break;
      default:  // f16 / bf16: not generated; leave zeros
        break;
    }
  }
}

double At(const meshdma::ArrayRef& a, int64_t i) {
  const std::byte* p = a.data();
  switch (a.dtype()) {
    case meshdma::DType::kU8:
      return reinterpret_cast<const uint8_t*>(p)[i];
    case meshdma::DType::kI32:
      return reinterpret_cast<const int32_t*>(p)[i];
    case meshdma::DType::kI64:
      return static_cast<double>(reinterpret_cast<const int64_t*>(p)[i]);
    case meshdma::DType::kF32:
      return reinterpret_cast<const float*>(p)[i];
    case meshdma::DType::kF64:
      return reinterpret_cast<const double*>(p)[i];
    default:
      return 0;
  }
}

std::vector<std::string> MeshAxes(const meshdma::Mesh& mesh) {
  std::vector<std::string> out;
  for (const auto& a : mesh.axes()) out.push_back(a.first);
  return out;
}

// Runs the C++ collective named by `spec` from `in` into `out`.
absl::Status Reference(const std::string& spec, const meshdma::ArrayRef& in,
                       const meshdma::ArrayRef& out,
                       const std::vector<std::string>& axes, bool* exact) {
  std::vector<std::string> p = absl::StrSplit(spec, ':');
  *exact = true;
  if (p[0] == "all_gather" || p[0] == "all_gather_tiled")
    return meshdma::all_gather(in, out, axes, p[0] == "all_gather_tiled");
  if ((p[0] == "shift" || p[0] == "shift_open") && p.size() == 2) {
    int64_t offset;
    if (!absl::SimpleAtoi(p[1], &offset))
      return absl::InvalidArgumentError("bad shift in --reference");
    int n = 1;
    for (const std::string& a : axes) n *= *meshdma::axis_size(a);
    std::vector<std::pair<int, int>> perm;
    for (int s = 0; s < n; ++s) {
      int64_t d = s + offset;
      if (p[0] == "shift") d = ((d % n) + n) % n;
      if (d >= 0 && d < n) perm.emplace_back(s, static_cast<int>(d));
    }
    return meshdma::ppermute(in, out, axes, perm);
  }
  if (p[0] == "all_to_all" && p.size() == 3) {
    int s, c;
    if (!absl::SimpleAtoi(p[1], &s) || !absl::SimpleAtoi(p[2], &c))
      return absl::InvalidArgumentError("bad all_to_all in --reference");
    return meshdma::all_to_all(in, out, axes, s, c);
  }
  static const std::pair<const char*, meshdma::ReduceOp> kOps[] = {
      {"sum", meshdma::ReduceOp::kSum},
      {"max", meshdma::ReduceOp::kMax},
      {"min", meshdma::ReduceOp::kMin},
      {"mean", meshdma::ReduceOp::kMean}};
  for (const auto& [name, op] : kOps) {
    *exact = op == meshdma::ReduceOp::kMax || op == meshdma::ReduceOp::kMin;
    if (p[0] == absl::StrCat("p", name))
      return meshdma::all_reduce(op, in, out, axes);
    if (p[0] == absl::StrCat("p", name, "_scatter"))
      return meshdma::reduce_scatter(op, in, out, axes);
  }
  return absl::InvalidArgumentError("unknown --reference " + spec);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags = Parse(argc, argv);
  std::ifstream file(flags.file);
  if (!file) {
    std::cerr << "meshdma-run: cannot read " << flags.file << "\n";
    return 1;
  }
  std::stringstream buffer;
  buffer << file.rdbuf();

  auto runtime = meshdma::Runtime::Create();
  if (!runtime.ok()) {
    std::cerr << "meshdma-run: " << runtime.status() << "\n";
    return 1;
  }
  meshdma::Runtime& rt = **runtime;
  const bool root = rt.launch().rank() == 0;

  std::string source = buffer.str();
  for (const auto& [key, value] : flags.defines) {
    std::string v =
        value == "devices" ? std::to_string(rt.num_devices()) : value;
    source = absl::StrReplaceAll(source, {{"@" + key + "@", v}});
  }

  std::vector<meshdma::Mesh::Axis> axes;
  if (flags.mesh.empty()) {
    axes.push_back({"x", rt.num_devices()});
  } else {
    for (absl::string_view part : absl::StrSplit(flags.mesh, ',')) {
      std::vector<std::string> kv = absl::StrSplit(part, ':');
      int size;
      if (kv.size() != 2 || !absl::SimpleAtoi(kv[1], &size))
        Usage("bad --mesh '" + flags.mesh + "'");
      axes.push_back({kv[0], size});
    }
  }
  auto mesh = rt.MakeMesh(axes);
  if (!mesh.ok()) {
    std::cerr << "meshdma-run: " << mesh.status() << "\n";
    return 1;
  }

  meshdma::jit::JitOptions jo;
  jo.from_mesh = flags.from_mesh;
  jo.expand_collectives = flags.expand;
  auto compile_start = std::chrono::steady_clock::now();
  auto jit = meshdma::jit::JitModule::Compile(source, jo);
  double compile_ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - compile_start)
                          .count();
  if (!jit.ok()) {
    // Diagnostics name "<meshdma-jit>"; say which file they are about.
    std::cerr << absl::StrReplaceAll(jit.status().message(),
                                     {{"<meshdma-jit>", flags.file}})
              << "meshdma-run: " << flags.file << " did not compile\n";
    return 1;
  }
  auto sig = (*jit)->Signature(flags.kernel);
  if (!sig.ok()) {
    std::cerr << "meshdma-run: " << sig.status().message() << " in "
              << flags.file << "\n";
    return 1;
  }
  const int nargs = static_cast<int>(sig->size());
  if (flags.in.empty() && flags.out.empty() && nargs > 0) {
    for (int i = 0; i + 1 < nargs; ++i) flags.in.push_back(i);
    flags.out.push_back(nargs - 1);
  }
  for (int i : flags.in)
    if (i < 0 || i >= nargs) Usage("--in index out of range");
  for (int i : flags.out)
    if (i < 0 || i >= nargs) Usage("--out index out of range");
  if (!flags.reference.empty() && (flags.in.empty() || flags.out.empty()))
    Usage("--reference needs an --in and an --out argument");
  std::vector<std::string> ref_axes =
      flags.axes.empty()
          ? MeshAxes(*mesh)
          : std::vector<std::string>(absl::StrSplit(flags.axes, ','));

  double jit_us = 0, ref_us = 0, max_diff = 0;
  std::mutex mu;
  absl::Status status = rt.Run(*mesh, [&]() -> absl::Status {
    int d = *meshdma::logical_device_id();
    std::vector<meshdma::ArrayRef> args;
    for (const meshdma::jit::KernelArg& a : *sig) {
      auto r = meshdma::AllocateSymmetric(a.dtype, a.shape);
      if (!r.ok()) return r.status();
      args.push_back(*r);
    }
    for (int i : flags.in) Fill(args[i], d);
    absl::Status s = (*jit)->Run(flags.kernel, args);
    if (!s.ok()) return s;
    if (!flags.reference.empty()) {
      const meshdma::ArrayRef& out = args[flags.out[0]];
      auto ref = meshdma::AllocateSymmetric(out.dtype(), out.shape());
      if (!ref.ok()) return ref.status();
      bool exact = true;
      s = Reference(flags.reference, args[flags.in[0]], *ref, ref_axes, &exact);
      if (!s.ok()) return s;
      int64_t n = 1;
      for (int64_t x : out.shape()) n *= x;
      double worst = 0;
      for (int64_t i = 0; i < n; ++i) {
        double want = At(*ref, i), got = At(out, i);
        double diff = std::abs(want - got);
        bool ok = exact
                      ? want == got
                      : diff <= flags.tolerance * std::max(1.0, std::abs(want));
        if (!ok)
          return absl::InternalError(
              absl::StrCat("device ", d, ": output element ", i, " is ", got,
                           ", the C++ reference gives ", want));
        worst = std::max(worst, diff);
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        max_diff = std::max(max_diff, worst);
      }
      if (flags.iterations > 0) {
        // Rounds of `per` JIT calls then `per` C++ calls, interleaved so
        // that drift on a shared machine hits both alike; the medians of
        // the rounds' per-call times are reported.
        const int rounds = std::max(5, flags.iterations / 20);
        const int per = std::max(1, flags.iterations / rounds);
        auto jit_call = [&] { return (*jit)->Run(flags.kernel, args); };
        auto ref_call = [&] {
          bool e;
          return Reference(flags.reference, args[flags.in[0]], *ref, ref_axes,
                           &e);
        };
        auto time = [&](auto&& fn) -> absl::StatusOr<double> {
          absl::Status bs = meshdma::device_barrier();
          if (!bs.ok()) return bs;
          auto t0 = std::chrono::steady_clock::now();
          for (int it = 0; it < per; ++it) {
            absl::Status is = fn();
            if (!is.ok()) return is;
          }
          auto t1 = std::chrono::steady_clock::now();
          return std::chrono::duration<double, std::micro>(t1 - t0).count() /
                 per;
        };
        for (int w = 0; w < 3; ++w) {
          if (absl::Status ws = jit_call(); !ws.ok()) return ws;
          if (absl::Status ws = ref_call(); !ws.ok()) return ws;
        }
        std::vector<double> js, rs;
        for (int r = 0; r < rounds; ++r) {
          auto j = time(jit_call);
          if (!j.ok()) return j.status();
          auto c = time(ref_call);
          if (!c.ok()) return c.status();
          js.push_back(*j);
          rs.push_back(*c);
        }
        auto median = [](std::vector<double> v) {
          std::sort(v.begin(), v.end());
          return v[v.size() / 2];
        };
        std::lock_guard<std::mutex> lock(mu);
        if (d == 0) {
          jit_us = median(js);
          ref_us = median(rs);
        }
      }
    }
    return absl::OkStatus();
  });
  if (!status.ok()) {
    std::cerr << "meshdma-run: " << status.message() << "\n";
    return 1;
  }
  if (root) {
    std::cout << "meshdma-run: " << flags.kernel << " ran on "
              << rt.num_devices() << " devices (" << rt.launch().num_processes()
              << " processes), compiled in " << static_cast<int64_t>(compile_ms)
              << " ms";
    if (!flags.reference.empty())
      std::cout << "; output matches the C++ " << flags.reference
                << " (max |diff| " << max_diff << ")";
    std::cout << "\n";
    if (flags.iterations > 0)
      std::cout << "meshdma-run: per call (median of interleaved rounds, "
                << flags.iterations << " calls each): jit " << jit_us
                << " us, c++ " << ref_us << " us, ratio "
                << (ref_us > 0 ? jit_us / ref_us : 0) << "\n";
  }
  return 0;
}
