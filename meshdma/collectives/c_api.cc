// The collectives' entry points of the C ABI (declared in
// meshdma/dma/c_api.h, defined here because collectives sit above dma).
#include "meshdma/dma/c_api.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "meshdma/collectives/collectives.h"
#include "meshdma/dma/internal/c_api_internal.h"
#include "meshdma/dma/runtime.h"

namespace {

using meshdma::ArrayRef;
using meshdma::dma_internal::ReportStatus;
using meshdma::dma_internal::ViewToArrayRef;

std::vector<std::string> Axes(const char* axes) {
  if (axes == nullptr || *axes == '\0') return {};
  return absl::StrSplit(axes, ',');
}

// The reduction `op` names; the collectives reject a value that is none of
// ReduceOp's enumerators (naming it and the device), so it is not checked
// twice.
meshdma::ReduceOp ToReduceOp(int32_t op) {
  return static_cast<meshdma::ReduceOp>(op);
}

// Runs `fn(in, out)` once both views convert.
template <typename Fn>
int WithRefs(const meshdma_view* in, const meshdma_view* out, Fn fn) {
  auto i = ViewToArrayRef(in, "input");
  if (!i.ok()) return ReportStatus(i.status());
  auto o = ViewToArrayRef(out, "output");
  if (!o.ok()) return ReportStatus(o.status());
  return ReportStatus(fn(*i, *o));
}

// The size of the group over `axes` on the current mesh.
absl::StatusOr<int> GroupSize(const std::vector<std::string>& axes) {
  int n = 1;
  for (const std::string& a : axes) {
    absl::StatusOr<int> s = meshdma::axis_size(a);
    if (!s.ok()) return s.status();
    n *= *s;
  }
  return n;
}

}  // namespace

extern "C" {

int meshdma_ppermute(const meshdma_view* in, const meshdma_view* out,
                     const char* axes, const int64_t* pairs, int32_t n_pairs) {
  if (n_pairs < 0 || (n_pairs > 0 && pairs == nullptr))
    return ReportStatus(
        absl::InvalidArgumentError("meshdma_ppermute: bad pairs"));
  std::vector<std::pair<int, int>> perm;
  for (int32_t i = 0; i < n_pairs; ++i)
    perm.emplace_back(static_cast<int>(pairs[2 * i]),
                      static_cast<int>(pairs[2 * i + 1]));
  return WithRefs(in, out, [&](const ArrayRef& i, const ArrayRef& o) {
    return meshdma::ppermute(i, o, Axes(axes), perm);
  });
}

int meshdma_ppermute_shift(const meshdma_view* in, const meshdma_view* out,
                           const char* axes, int64_t offset, int32_t rotate) {
  std::vector<std::string> names = Axes(axes);
  absl::StatusOr<int> n = GroupSize(names);
  if (!n.ok()) return ReportStatus(n.status());
  std::vector<std::pair<int, int>> perm;
  for (int src = 0; src < *n; ++src) {
    int64_t dst = src + offset;
    if (rotate) dst = ((dst % *n) + *n) % *n;
    if (dst >= 0 && dst < *n) perm.emplace_back(src, static_cast<int>(dst));
  }
  return WithRefs(in, out, [&](const ArrayRef& i, const ArrayRef& o) {
    return meshdma::ppermute(i, o, names, perm);
  });
}

int meshdma_all_gather(const meshdma_view* in, const meshdma_view* out,
                       const char* axes, int32_t tiled) {
  return WithRefs(in, out, [&](const ArrayRef& i, const ArrayRef& o) {
    return meshdma::all_gather(i, o, Axes(axes), tiled != 0);
  });
}

int meshdma_all_reduce(int32_t op, const meshdma_view* in,
                       const meshdma_view* out, const char* axes) {
  return WithRefs(in, out, [&](const ArrayRef& i, const ArrayRef& o) {
    return meshdma::all_reduce(ToReduceOp(op), i, o, Axes(axes));
  });
}

int meshdma_reduce_scatter(int32_t op, const meshdma_view* in,
                           const meshdma_view* out, const char* axes) {
  return WithRefs(in, out, [&](const ArrayRef& i, const ArrayRef& o) {
    return meshdma::reduce_scatter(ToReduceOp(op), i, o, Axes(axes));
  });
}

int meshdma_all_to_all(const meshdma_view* in, const meshdma_view* out,
                       const char* axes, int32_t split_axis,
                       int32_t concat_axis) {
  return WithRefs(in, out, [&](const ArrayRef& i, const ArrayRef& o) {
    return meshdma::all_to_all(i, o, Axes(axes), split_axis, concat_axis);
  });
}

}  // extern "C"
