#include "meshdma/dma/check/race_checker.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "meshdma/base/logging.h"
#include "meshdma/base/thread_name.h"
#include "meshdma/dma/transport/transport.h"

namespace meshdma::dma_internal {
namespace {

// How long a mailbox may stay full, or a peer's slot half-written, before
// checked mode gives up on it.
constexpr int64_t kMailboxPatienceNs = int64_t{10} * 1000 * 1000 * 1000;

// The checker of the live runtime (at most one per process), for views of
// ordinary memory made outside any device.
std::atomic<RaceChecker*> g_active_checker{nullptr};

// A strided view is tracked as its contiguous byte runs, up to this many;
// a view with more runs is tracked as the hull of its bytes.
constexpr int64_t kMaxRuns = 4096;

struct Run {
  int64_t lo;
  int64_t hi;
};

// The byte runs of a view relative to its element 0, merged where adjacent;
// strides in elements.
std::vector<Run> RunsOf(int rank, std::span<const int64_t> shape,
                        std::span<const int64_t> strides, int64_t elem) {
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 0) return {};
  }
  if (rank == 0) return {{0, elem}};
  // Trailing dimensions that are contiguous together form one run.
  int inner = rank - 1;
  int64_t run_elems = strides[inner] == 1 ? shape[inner] : 1;
  if (strides[inner] == 1) {
    while (inner > 0 && strides[inner - 1] == run_elems) {
      --inner;
      run_elems *= shape[inner];
    }
  } else {
    ++inner;  // Every element is its own run.
  }
  int64_t runs = 1;
  bool hull = false;
  for (int d = 0; d < inner; ++d) {
    if (strides[d] < 0) hull = true;
    runs *= shape[d];
    if (runs > kMaxRuns) hull = true;
  }
  if (hull) {
    int64_t lo = 0, hi = 0;
    for (int d = 0; d < rank; ++d) {
      const int64_t span = (shape[d] - 1) * strides[d];
      (span < 0 ? lo : hi) += span;
    }
    return {{lo * elem, (hi + 1) * elem}};
  }
  std::vector<Run> out;
  out.reserve(static_cast<size_t>(runs));
  std::vector<int64_t> idx(static_cast<size_t>(inner), 0);
  for (int64_t r = 0; r < runs; ++r) {
    int64_t off = 0;
    for (int d = 0; d < inner; ++d) off += idx[d] * strides[d];
    const Run run{off * elem, (off + run_elems) * elem};
    if (!out.empty() && out.back().hi == run.lo) {
      out.back().hi = run.hi;
    } else {
      out.push_back(run);
    }
    for (int d = inner - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<Run> RunsOf(const ArrayRef& ref) {
  return RunsOf(ref.rank(), ref.shape(), ref.strides(),
                static_cast<int64_t>(DTypeSize(ref.dtype())));
}

std::vector<Run> RunsOf(const ViewLayout& layout, int64_t elem) {
  std::vector<int64_t> strides(layout.rank);
  for (int d = 0; d < layout.rank; ++d) {
    strides[d] = layout.byte_strides[d] / elem;
  }
  return RunsOf(layout.rank, {layout.shape.data(), size_t(layout.rank)},
                strides, elem);
}

void Join(VectorClock& into, const VectorClock& from) {
  for (size_t i = 0; i < into.size(); ++i) into[i] = std::max(into[i], from[i]);
}

}  // namespace

// One tracked access to a byte range.
struct RaceChecker::Access {
  bool write = false;
  int comp = 0;        // Vector-clock component of the access.
  uint32_t epoch = 0;  // Its value at the access.
  std::shared_ptr<const VectorClock> vc;
  int device = 0;                      // The accessing device (a DMA's issuer).
  std::shared_ptr<const DmaInfo> dma;  // Set for a DMA's accesses.
  std::shared_ptr<const std::string> site;
  std::shared_ptr<const std::string> buffer;  // The allocation touched.
};

// What checked mode attaches to a DMA (`DmaOp::check_info`).
struct RaceChecker::DmaInfo {
  uint64_t id = 0;
  int issuer = 0;
  int target = 0;
  bool local = false;
  int64_t send_sem = -1;
  int64_t recv_sem = 0;
  ArrayRef dst;
  int dst_space = 0;
  int64_t dst_base = 0;  // Shadow offset of dst element 0.
  uint32_t seq = 0;      // The DMA's value of its issuer's DMA component.
  // The issuer's clock at start(): what the DMA's accesses are ordered
  // after. `release` adds the DMA itself (seq): what its completion tells
  // whoever waits on its semaphores.
  std::shared_ptr<const VectorClock> vc;
  VectorClock release;
  std::shared_ptr<const std::string> write_site;
  std::shared_ptr<const std::string> dst_buffer;
};

struct RaceChecker::DeviceState {
  VectorClock vc;
  std::shared_ptr<const VectorClock> snapshot;  // Of `vc`, while unchanged.
  uint32_t dma_seq = 0;
  struct Alloc {
    int64_t offset;
    int64_t bytes;
    std::string kernel;
    int index;  // Within its kernel's allocations.
  };
  // Written by the device; read by any thread that describes a buffer.
  std::mutex alloc_mu;
  std::vector<Alloc> allocs;
  std::mutex sem_mu;
  std::unordered_map<int64_t, VectorClock> sems;
};

struct RaceChecker::Shadow {
  struct Entry {
    int64_t hi;
    Access access;
  };
  std::mutex mu;
  std::multimap<int64_t, Entry> entries;  // Keyed by the range's start.
  int64_t max_len = 0;
};

RaceChecker::RaceChecker(int num_devices,
                         std::function<void(int, const std::string&)> on_race)
    : n_(num_devices), on_race_(std::move(on_race)) {
  for (int i = 0; i < n_; ++i) {
    devices_.push_back(std::make_unique<DeviceState>());
  }
  for (int i = 0; i <= n_; ++i) shadows_.push_back(std::make_unique<Shadow>());
  Reset();
  g_active_checker.store(this, std::memory_order_release);
  live_checkers_.fetch_add(1, std::memory_order_relaxed);
}

RaceChecker::~RaceChecker() {
  RaceChecker* self = this;
  g_active_checker.compare_exchange_strong(self, nullptr);
  live_checkers_.fetch_sub(1, std::memory_order_relaxed);
  DetachMailboxes();
}

void RaceChecker::AttachMailboxes(ClockMailbox* own,
                                  std::vector<ClockMailbox*> of_device) {
  own_mailbox_ = own;
  mailbox_of_device_ = std::move(of_device);
  if (own_mailbox_ == nullptr) return;
  drainer_ = std::thread([this] {
    while (!stop_drainer_.load(std::memory_order_relaxed)) {
      absl::SleepFor(absl::Milliseconds(1));
      DrainMailbox();
    }
  });
  base_internal::NameThread(drainer_, "meshdma-races");
}

void RaceChecker::DetachMailboxes() {
  stop_drainer_.store(true);
  if (drainer_.joinable()) drainer_.join();
  own_mailbox_ = nullptr;
  mailbox_of_device_.clear();
}

void RaceChecker::DrainMailbox() {
  ClockMailbox* box = own_mailbox_;
  if (box == nullptr || box->Empty()) return;
  std::lock_guard<std::mutex> lock(drain_mu_);
  absl::Status s = box->Drain(
      [this](const ClockMessage& m) {
        if (m.target < 0 || m.target >= n_) return;
        OnRemoteArrival(m.target, m.issuer, m.sem_offset, m.clock, m.dma_seq,
                        m.dst_offset, m.has_layout ? &m.dst_layout : nullptr,
                        m.elem_bytes);
      },
      kMailboxPatienceNs);
  if (!s.ok()) LogError(s.message());
}

void RaceChecker::Post(ClockMailbox* box, const ClockMessage& m) {
  absl::Status s = box->Post(m, kMailboxPatienceNs);
  if (!s.ok()) {
    LogError(absl::StrCat(s.message(), "; the races reported may be wrong"));
  }
}

void RaceChecker::OnOrdinaryView(uintptr_t lo, uintptr_t hi) {
  RaceChecker* rc = g_active_checker.load(std::memory_order_acquire);
  if (rc == nullptr || hi <= lo) return;
  rc->ForgetOrdinary(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
}

void RaceChecker::ForgetOrdinary(int64_t lo, int64_t hi) {
  if (hi <= lo) return;
  Shadow& s = *shadows_[n_];
  std::lock_guard<std::mutex> lock(s.mu);
  // The parts of straddling entries outside [lo, hi) are kept.
  std::vector<std::pair<int64_t, Shadow::Entry>> kept;
  for (auto it = s.entries.lower_bound(lo - s.max_len);
       it != s.entries.end() && it->first < hi;) {
    const int64_t plo = it->first, phi = it->second.hi;
    if (phi <= lo) {
      ++it;
      continue;
    }
    if (plo < lo) kept.push_back({plo, Shadow::Entry{lo, it->second.access}});
    if (phi > hi) kept.push_back({hi, Shadow::Entry{phi, it->second.access}});
    it = s.entries.erase(it);
  }
  for (auto& [at, entry] : kept) s.entries.emplace(at, std::move(entry));
}

void RaceChecker::Reset() {
  for (int i = 0; i < n_; ++i) {
    DeviceState& d = *devices_[i];
    d.vc.assign(2 * n_, 0);
    d.vc[i] = 1;
    d.snapshot.reset();
    d.dma_seq = 0;
    {
      std::lock_guard<std::mutex> lock(d.alloc_mu);
      d.allocs.clear();
    }
    std::lock_guard<std::mutex> lock(d.sem_mu);
    d.sems.clear();
  }
  for (auto& s : shadows_) {
    std::lock_guard<std::mutex> lock(s->mu);
    s->entries.clear();
    s->max_len = 0;
  }
}

std::shared_ptr<const VectorClock> RaceChecker::Snapshot(DeviceState& d) {
  if (d.snapshot == nullptr) d.snapshot = std::make_shared<VectorClock>(d.vc);
  return d.snapshot;
}

void RaceChecker::OnAllocate(int device, int64_t offset, int64_t bytes,
                             absl::string_view kernel) {
  std::lock_guard<std::mutex> lock(state(device).alloc_mu);
  auto& allocs = state(device).allocs;
  int index = 0;
  for (auto it = allocs.rbegin(); it != allocs.rend(); ++it) {
    if (it->kernel != kernel) break;
    ++index;
  }
  allocs.push_back({offset, bytes, std::string(kernel), index});
}

void RaceChecker::OnFree(int device, int64_t lo, int64_t hi) {
  std::lock_guard<std::mutex> lock(state(device).alloc_mu);
  auto& allocs = state(device).allocs;
  allocs.erase(std::remove_if(allocs.begin(), allocs.end(),
                              [&](const DeviceState::Alloc& a) {
                                return a.offset >= lo && a.offset < hi;
                              }),
               allocs.end());
}

std::string RaceChecker::DescribeBuffer(int device, int64_t offset) const {
  std::lock_guard<std::mutex> lock(devices_[device]->alloc_mu);
  const auto& allocs = devices_[device]->allocs;
  for (auto it = allocs.rbegin(); it != allocs.rend(); ++it) {
    if (offset >= it->offset && offset < it->offset + it->bytes) {
      return absl::StrCat("allocation #", it->index, " of kernel '", it->kernel,
                          "' (heap offset ", it->offset, ", ", it->bytes,
                          " bytes)");
    }
  }
  return absl::StrCat("heap offset ", offset);
}

void RaceChecker::OnDmaStart(int device, absl::string_view kernel, DmaOp& op,
                             const ArrayRef& src, const ArrayRef& dst) {
  DeviceState& d = state(device);
  auto info = std::make_shared<DmaInfo>();
  info->id = op.event.id;
  info->issuer = device;
  info->target = op.event.dst_device;
  info->local = op.event.send_sem < 0;
  info->send_sem = op.event.send_sem;
  info->recv_sem = op.event.recv_sem;
  auto vc = Snapshot(d);
  info->seq = ++d.dma_seq;
  info->vc = vc;
  info->release = *vc;
  info->release[n_ + device] = info->seq;
  info->dst = dst;
  if (dst.is_symmetric()) {
    info->dst_space = info->target;
    info->dst_base = dst.heap_offset();
    info->dst_buffer = std::make_shared<std::string>(
        DescribeBuffer(device, dst.heap_offset()));
  } else {
    info->dst_space = n_;
    info->dst_base = reinterpret_cast<intptr_t>(dst.data());
    info->dst_buffer = std::make_shared<std::string>("memory outside the heap");
  }
  info->write_site = std::make_shared<std::string>(
      absl::StrCat("DMA write into device ", info->target, " issued by device ",
                   device, " in kernel '", kernel, "'"));
  Access a;
  a.write = false;
  a.comp = n_ + device;
  a.epoch = d.dma_seq;
  a.vc = vc;
  a.device = device;
  a.dma = info;
  a.site = std::make_shared<std::string>(
      absl::StrCat("DMA read of the source on device ", device, " (to device ",
                   info->target, ") in kernel '", kernel, "'"));
  if (src.is_symmetric()) {
    a.buffer = std::make_shared<std::string>(
        DescribeBuffer(device, src.heap_offset()));
    Record(device, src, a);
  } else {
    a.buffer = std::make_shared<std::string>("memory outside the heap");
    Record(n_, src, a);
  }
  op.check_clock = *vc;
  op.check_seq = info->seq;
  op.check_info = std::move(info);
  // The issuer's later steps are not covered by the DMA's clock.
  ++d.vc[device];
  d.snapshot.reset();
}

void RaceChecker::OnDmaComplete(const DmaOp& op) {
  auto info = std::static_pointer_cast<const DmaInfo>(op.check_info);
  if (info == nullptr) return;
  if (ClockMailbox* box = info->local ? nullptr : MailboxOf(info->target)) {
    // A peer process on this host owns the destination: it records the write
    // and its semaphore's clock when it drains the message.
    Post(box, ShmArrival(*info, op));
    JoinSemaphore(info->issuer, info->send_sem, info->release);
    return;
  }
  Access a;
  a.write = true;
  a.comp = n_ + info->issuer;
  a.epoch = info->seq;
  a.vc = info->vc;
  a.device = info->issuer;
  a.dma = info;
  a.site = info->write_site;
  a.buffer = info->dst_buffer;
  for (const Run& r : RunsOf(info->dst)) {
    RecordRange(info->dst_space, info->dst_base + r.lo, info->dst_base + r.hi,
                a);
  }
  JoinSemaphore(info->local ? info->issuer : info->target, info->recv_sem,
                info->release);
  if (!info->local) JoinSemaphore(info->issuer, info->send_sem, info->release);
}

void RaceChecker::JoinSemaphore(int device, int64_t sem_offset,
                                const VectorClock& clock) {
  DeviceState& d = state(device);
  std::lock_guard<std::mutex> lock(d.sem_mu);
  auto [it, inserted] = d.sems.try_emplace(sem_offset, VectorClock(2 * n_, 0));
  Join(it->second, clock);
}

ClockMessage RaceChecker::ShmArrival(const DmaInfo& info, const DmaOp& op) {
  ClockMessage m;
  m.target = info.target;
  m.issuer = info.issuer;
  m.sem_offset = info.recv_sem;
  m.dma_seq = info.seq;
  m.has_layout = true;
  m.dst_offset = info.dst_base;
  m.elem_bytes = op.elem_bytes;
  m.dst_layout = op.dst_layout;
  m.clock = *info.vc;
  return m;
}

void RaceChecker::OnSignal(int device, int target_device, int64_t sem_offset) {
  DeviceState& d = state(device);
  if (ClockMailbox* box = MailboxOf(target_device)) {
    ClockMessage m;
    m.target = target_device;
    m.sem_offset = sem_offset;
    m.clock = d.vc;
    Post(box, m);
  } else {
    JoinSemaphore(target_device, sem_offset, d.vc);
  }
  ++d.vc[device];
  d.snapshot.reset();
}

void RaceChecker::OnWaitEnd(int device, int64_t sem_offset) {
  DrainMailbox();  // Clocks of peers on this host that moved the semaphore.
  DeviceState& d = state(device);
  std::lock_guard<std::mutex> lock(d.sem_mu);
  auto it = d.sems.find(sem_offset);
  if (it == d.sems.end()) return;
  Join(d.vc, it->second);
  d.snapshot.reset();
}

void RaceChecker::OnRemoteArrival(int target, int issuer, int64_t sem_offset,
                                  std::span<const uint32_t> clock,
                                  uint32_t dma_seq, int64_t dst_offset,
                                  const ViewLayout* dst_layout,
                                  int64_t elem_bytes) {
  if (clock.size() != static_cast<size_t>(2 * n_)) return;
  auto vc = std::make_shared<VectorClock>(clock.begin(), clock.end());
  VectorClock release = *vc;
  if (issuer >= 0) {
    release[n_ + issuer] = std::max(release[n_ + issuer], dma_seq);
  }
  if (dst_layout != nullptr && issuer >= 0) {
    auto info = std::make_shared<DmaInfo>();
    info->issuer = issuer;
    info->target = target;
    info->recv_sem = sem_offset;
    info->seq = dma_seq;
    info->vc = vc;
    Access a;
    a.write = true;
    a.comp = n_ + issuer;
    a.epoch = dma_seq;
    a.vc = vc;
    a.device = issuer;
    a.dma = info;
    a.site = std::make_shared<std::string>(
        absl::StrCat("DMA write into device ", target, " issued by device ",
                     issuer, " in another process"));
    a.buffer =
        std::make_shared<std::string>(DescribeBuffer(target, dst_offset));
    for (const Run& r : RunsOf(*dst_layout, elem_bytes)) {
      RecordRange(target, dst_offset + r.lo, dst_offset + r.hi, a);
    }
  }
  JoinSemaphore(target, sem_offset, release);
}

const VectorClock& RaceChecker::ClockOf(int device) { return state(device).vc; }

void RaceChecker::OnDrained(int device) {
  DeviceState& d = state(device);
  d.vc[n_ + device] = d.dma_seq;
  d.snapshot.reset();
}

void RaceChecker::OnAccess(int device, absl::string_view kernel,
                           const ArrayRef& ref, bool write,
                           absl::string_view what) {
  DeviceState& d = state(device);
  Access a;
  a.write = write;
  a.comp = device;
  a.epoch = d.vc[device];
  a.vc = Snapshot(d);
  a.device = device;
  a.site = std::make_shared<std::string>(
      absl::StrCat(what, " on device ", device, " in kernel '", kernel, "'"));
  if (ref.is_symmetric()) {
    a.buffer = std::make_shared<std::string>(
        DescribeBuffer(device, ref.heap_offset()));
    Record(device, ref, a);
  } else {
    a.buffer = std::make_shared<std::string>("memory outside the heap");
    Record(n_, ref, a);
  }
}

void RaceChecker::Record(int space, const ArrayRef& ref, const Access& a) {
  const int64_t base = ref.is_symmetric()
                           ? ref.heap_offset()
                           : reinterpret_cast<intptr_t>(ref.data());
  for (const Run& r : RunsOf(ref))
    RecordRange(space, base + r.lo, base + r.hi, a);
}

void RaceChecker::RecordRange(int space, int64_t lo, int64_t hi,
                              const Access& a) {
  if (hi <= lo) return;
  Shadow& s = *shadows_[space];
  std::vector<std::pair<std::pair<int64_t, int64_t>, Access>> races;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (auto it = s.entries.lower_bound(lo - s.max_len);
         it != s.entries.end() && it->first < hi;) {
      const Access& p = it->second.access;
      const int64_t plo = it->first, phi = it->second.hi;
      if (phi <= lo) {
        ++it;
        continue;
      }
      const bool p_before_a = (*a.vc)[p.comp] >= p.epoch;
      const bool a_before_p = (*p.vc)[a.comp] >= a.epoch;
      const bool same_dma = p.dma != nullptr && p.dma == a.dma;
      if ((a.write || p.write) && !p_before_a && !a_before_p && !same_dma) {
        races.push_back({{std::max(lo, plo), std::min(hi, phi)}, p});
      }
      // `a` subsumes an earlier access it covers and is ordered after.
      if (p_before_a && plo >= lo && phi <= hi && (a.write || !p.write)) {
        it = s.entries.erase(it);
      } else {
        ++it;
      }
    }
    s.entries.emplace(lo, Shadow::Entry{hi, a});
    s.max_len = std::max(s.max_len, hi - lo);
  }
  for (const auto& [range, p] : races) {
    Report(space, range.first, range.second, p, a);
  }
}

void RaceChecker::Report(int space, int64_t lo, int64_t hi,
                         const Access& earlier, const Access& later) {
  // Step 1: once per pair of sites.
  {
    std::lock_guard<std::mutex> lock(report_mu_);
    auto key = std::minmax(*earlier.site, *later.site);
    if (!reported_sites_.insert({key.first, key.second}).second) return;
    ++num_races_;
  }
  auto describe = [&](const Access& x) {
    std::string s = absl::StrCat(x.write ? "write" : "read", " by ", *x.site);
    if (x.dma != nullptr) {
      absl::StrAppend(&s, " (DMA #", x.dma->id, ")");
    }
    return s;
  };
  // Step 2: which wait would have ordered them.
  std::string hint;
  auto sem_role = [](const DmaInfo& dma) {
    return dma.local ? absl::StrCat("its semaphore @", dma.recv_sem)
                     : absl::StrCat("recv_sem @", dma.recv_sem);
  };
  // The DMA of a pair where only one access is a DMA's.
  const Access* dma_side = nullptr;
  const Access* other = nullptr;
  if ((earlier.dma != nullptr) != (later.dma != nullptr)) {
    dma_side = earlier.dma != nullptr ? &earlier : &later;
    other = earlier.dma != nullptr ? &later : &earlier;
  }
  if (dma_side != nullptr) {
    const DmaInfo& dma = *dma_side->dma;
    const std::string before_dma = absl::StrCat(
        "a semaphore signalled by device ", other->device,
        " after its access and waited on by device ", dma.issuer,
        " before starting the DMA (an entry barrier, a handshake or a "
        "capacity semaphore)");
    if (!dma_side->write && other->device == dma.issuer) {
      hint = dma.local ? absl::StrCat("device ", dma.issuer, "'s wait on ",
                                      sem_role(dma), " before its access")
                       : absl::StrCat("device ", dma.issuer,
                                      "'s wait_send on send_sem @",
                                      dma.send_sem, " before its access");
    } else if (dma_side->write && other->device == dma.target) {
      hint =
          absl::StrCat("device ", dma.target, "'s wait_recv on ", sem_role(dma),
                       " before its access (if the access belongs after "
                       "the DMA), or ",
                       before_dma, " (if it belongs before)");
    } else {
      hint = before_dma;
    }
  } else if (earlier.dma != nullptr && later.dma != nullptr) {
    hint = absl::StrCat("device ", later.dma->issuer,
                        " waiting, before starting its DMA, on a semaphore "
                        "signalled after the other DMA was waited for");
  }
  if (hint.empty()) {
    hint = absl::StrCat("a semaphore signalled by device ", earlier.device,
                        " after the first access and waited on by device ",
                        later.device, " before the second");
  }
  // Step 3: the report, kept and handed to the callback.
  const std::string where = space < n_
                                ? absl::StrCat("device ", space, "'s heap")
                                : std::string("memory outside the heap");
  const std::string text = absl::StrCat(
      "data race on ", where, ", ", *later.buffer, ", bytes [", lo, ", ", hi,
      "):\n    ", describe(earlier), "\n    ", describe(later),
      "\n    no chain of signals and waits orders them; ", hint, " would have");
  {
    std::lock_guard<std::mutex> lock(report_mu_);
    reports_.push_back(text);
  }
  if (on_race_) on_race_(later.device, text);
}

absl::Status RaceChecker::TakeReport() {
  DrainMailbox();
  std::lock_guard<std::mutex> lock(report_mu_);
  if (reports_.empty()) return absl::OkStatus();
  std::string text =
      absl::StrCat("checked mode found ", reports_.size(), " data race(s):\n  ",
                   absl::StrJoin(reports_, "\n  "));
  reports_.clear();
  return absl::FailedPreconditionError(text);
}

int64_t RaceChecker::num_races() const {
  std::lock_guard<std::mutex> lock(report_mu_);
  return num_races_;
}

}  // namespace meshdma::dma_internal
