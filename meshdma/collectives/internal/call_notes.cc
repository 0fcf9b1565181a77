// Call notes (common.h): what every collective call publishes, and the
// comparisons of a slow wait and of the end of a Run.
#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "meshdma/base/deadline.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/dma/internal/call_note.h"
#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/internal/runtime_impl.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::collectives_internal {

using dma_internal::CallNote;
using dma_internal::CallNoteView;

// A group's calls on this device in the current Run.
struct NotedGroup {
  uint64_t key = 0;  // The same on every member.
  const Mesh* mesh = nullptr;
  int global_device = 0;
  RingPosition ring;
  std::vector<std::string> axes;
  std::vector<int> globals;  // The members' global devices.
  int64_t calls = 0;
  int64_t signature = 0;  // Of the last call.
  bool by_channel = false;
  std::array<int64_t, 3> pieces{};

  Group AsGroup() const {
    Group g;
    static_cast<RingPosition&>(g) = ring;
    g.mesh = mesh;
    g.global_device = global_device;
    g.axes = axes;
    return g;
  }
};

namespace {

// The call note's call word: the call's number, and its path.
int64_t CallWord(int64_t call, bool by_channel) {
  return call * 2 + (by_channel ? 1 : 0);
}

const char* PathWords(bool by_channel) {
  return by_channel ? "over the group's channel" : "in a kernel";
}

// This device thread's notes in the current Run.
struct Notes {
  dma_internal::RuntimeImpl* runtime = nullptr;
  CallNote* own = nullptr;
  std::vector<std::unique_ptr<NotedGroup>> groups;
  NotedGroup* last = nullptr;  // The group of the last call.
};
thread_local Notes* t_notes = nullptr;

absl::Status CheckNotes();
absl::Status WaitForPeersAtRunEnd();

// The first note of a Run: the state, forgotten at its end, and the wait
// for the members at the Run's end.
Notes* StartNotes() {
  dma_internal::Device* device = dma_internal::CurrentDevice();
  if (device == nullptr) return nullptr;
  auto notes = std::make_unique<Notes>();
  notes->runtime = device->runtime();
  notes->own = device->call_note();
  if (!AtRunEnd([] {
         delete t_notes;
         t_notes = nullptr;
       }).ok()) {
    return nullptr;
  }
  if (!AtRunExit(WaitForPeersAtRunEnd).ok()) return nullptr;
  dma_internal::SetSlowWaitCheck(&CheckNotes);
  t_notes = notes.release();
  return t_notes;
}

uint64_t GroupKey(const RingPosition& ring) {
  // FNV-1a over the members' LOGICAL ids; never 0.
  uint64_t key = 14695981039346656037u;
  for (int m : ring.members) {
    key = (key ^ static_cast<uint32_t>(m)) * 1099511628211u;
  }
  return key | 1;
}

// `peer`'s note, when it is readable and of this Run.
std::optional<CallNoteView> PeerNote(const Notes& notes, int global,
                                     uint64_t run) {
  if (global < 0) return std::nullopt;
  const CallNote* note = dma_internal::CallNoteOf(*notes.runtime, global);
  if (note == nullptr) return std::nullopt;
  std::optional<CallNoteView> view = note->Read();
  if (!view.has_value() || view->run != run) return std::nullopt;
  return view;
}

// "this device calls X, its call #k over this group (in a kernel)".
std::string MyCall(const NotedGroup& group) {
  return absl::StrCat("this device calls ", DescribeCall(group.signature),
                      ", its call #", group.calls, " over this group (",
                      PathWords(group.by_channel), ")");
}

// An error where the member at `position` made its call of this device's
// last number over `group` (`theirs`) otherwise: another signature, path
// or ring pieces.
absl::Status CompareSameNumber(const NotedGroup& group, int position,
                               const CallNoteView& theirs) {
  const bool their_channel = theirs.call % 2 == 1;
  if (theirs.group != group.key || theirs.call / 2 != group.calls ||
      group.signature == 0 || theirs.signature == 0) {
    return absl::OkStatus();
  }
  const int peer = group.ring.members[position];
  if (theirs.signature == group.signature &&
      their_channel == group.by_channel) {
    if (theirs.detail == group.pieces) return absl::OkStatus();
    return CollectiveError(
        "a collective call", group.AsGroup(),
        absl::StrCat(MyCall(group), ", and so does device LOGICAL id ", peer,
                     ", but their plans cut different pieces: this "
                     "device's are ",
                     DescribePieces(group.pieces), ", device LOGICAL id ", peer,
                     "'s ", DescribePieces(theirs.detail),
                     "; every device must pass the same CollectiveOptions"));
  }
  return CollectiveError(
      "a collective call", group.AsGroup(),
      absl::StrCat(MyCall(group), ", but device LOGICAL id ", peer, " calls ",
                   DescribeCall(theirs.signature), " ",
                   PathWords(their_channel),
                   "; every device of the group must make the same call "
                   "(sizes on both sides of the channel's largest row take "
                   "different paths)"));
}

// The error when the member at `position` of `group` made call `their_call`
// over it (`theirs`) while this device has ended its Run after fewer.
absl::Status PeerCallsPastEnd(const NotedGroup& group, int position,
                              const CallNoteView& theirs) {
  return CollectiveError(
      "the end of the Run", group.AsGroup(),
      absl::StrCat(
          "this device has reached the end of its Run after ", group.calls,
          " calls over this group, but device LOGICAL id ",
          group.ring.members[position], " calls ",
          DescribeCall(theirs.signature), ", its call #", theirs.call / 2,
          " over this group; a device skipped a "
          "call or made one more: every device of the group must "
          "make the same sequence of collective calls"));
}

// At the end of this device's Run: an error where a member of one of its
// groups makes more calls over it, or made its last call of this device's
// number otherwise; `all_ended` when every readable member has ended its
// Run too.
absl::Status CompareAtRunEnd(const Notes& notes, uint64_t run,
                             bool& all_ended) {
  all_ended = true;
  for (const auto& group : notes.groups) {
    for (int j = 0; j < group->ring.size(); ++j) {
      if (j == group->ring.index) continue;
      if (group->globals[j] < 0 ||
          dma_internal::CallNoteOf(*notes.runtime, group->globals[j]) ==
              nullptr) {
        continue;
      }
      std::optional<CallNoteView> theirs =
          PeerNote(notes, group->globals[j], run);
      if (!theirs.has_value() || !theirs->ended) all_ended = false;
      if (!theirs.has_value()) continue;
      if (!theirs->ended && theirs->group == group->key &&
          theirs->call / 2 > group->calls) {
        return PeerCallsPastEnd(*group, j, *theirs);
      }
      MESHDMA_RETURN_IF_ERROR(CompareSameNumber(*group, j, *theirs));
    }
  }
  return absl::OkStatus();
}

// During a call: an error where a member made another call of the same
// number over the group, or ended its Run before it.
absl::Status CompareDuringCall(const Notes& notes, uint64_t run) {
  const NotedGroup& group = *notes.last;
  for (int j = 0; j < group.ring.size(); ++j) {
    if (j == group.ring.index) continue;
    std::optional<CallNoteView> theirs = PeerNote(notes, group.globals[j], run);
    if (!theirs.has_value() || theirs->group != group.key) continue;
    if (theirs->ended && theirs->call / 2 < group.calls) {
      return CollectiveError(
          "a collective call", group.AsGroup(),
          absl::StrCat(
              MyCall(group), ", but device LOGICAL id ", group.ring.members[j],
              " has reached the end of its Run after ", theirs->call / 2,
              " calls over this group; a device "
              "skipped a call or made one more: every device of the "
              "group must make the same sequence of collective "
              "calls"));
    }
    MESHDMA_RETURN_IF_ERROR(CompareSameNumber(group, j, *theirs));
  }
  return absl::OkStatus();
}

// The slow-wait check (dma/internal/call_note.h).
absl::Status CheckNotes() {
  const Notes* notes = t_notes;
  if (notes == nullptr || notes->last == nullptr) return absl::OkStatus();
  const std::optional<CallNoteView> mine = notes->own->Read();
  if (!mine.has_value()) return absl::OkStatus();
  if (mine->ended) {
    bool all_ended = false;
    return CompareAtRunEnd(*notes, mine->run, all_ended);
  }
  return CompareDuringCall(*notes, mine->run);
}

// The end of this device's Run (common.h): until every member of its
// groups has ended its Run too (as its note shows, here or sent from
// another host), a member shows a call past this device's, the launch is
// aborted, or the wait timeout passes.
absl::Status WaitForPeersAtRunEnd() {
  const Notes* notes = t_notes;
  if (notes == nullptr) return absl::OkStatus();
  const std::optional<CallNoteView> mine = notes->own->Read();
  if (!mine.has_value()) return absl::OkStatus();
  const base_internal::Deadline deadline =
      base_internal::Deadline::After(notes->runtime->wait_timeout());
  for (int i = 0;; ++i) {
    bool all_ended = false;
    MESHDMA_RETURN_IF_ERROR(CompareAtRunEnd(*notes, mine->run, all_ended));
    if (all_ended || deadline.Expired()) return absl::OkStatus();
    if (notes->runtime->aborted()) {
      return absl::AbortedError(absl::StrCat("the end of the Run abandoned: ",
                                             notes->runtime->abort_reason()));
    }
    if (notes->runtime->PollRemote()) continue;
    if (i < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

}  // namespace

absl::Status CompareNotesAtEntry() {
  const Notes* notes = t_notes;
  if (notes == nullptr || notes->last == nullptr) return absl::OkStatus();
  const std::optional<CallNoteView> mine = notes->own->Read();
  if (!mine.has_value()) return absl::OkStatus();
  const NotedGroup& group = *notes->last;
  for (int j = 0; j < group.ring.size(); ++j) {
    if (j == group.ring.index) continue;
    std::optional<CallNoteView> theirs =
        PeerNote(*notes, group.globals[j], mine->run);
    if (!theirs.has_value()) continue;
    MESHDMA_RETURN_IF_ERROR(CompareSameNumber(group, j, *theirs));
  }
  return absl::OkStatus();
}

NotedGroup* NotedGroupOf(const Group& g) {
  Notes* notes = t_notes != nullptr ? t_notes : StartNotes();
  if (notes == nullptr) return nullptr;
  const uint64_t key = GroupKey(g);
  for (const auto& group : notes->groups) {
    if (group->key == key && group->ring.members == g.members) {
      return group.get();
    }
  }
  auto group = std::make_unique<NotedGroup>();
  group->key = key;
  group->mesh = g.mesh;
  group->global_device = g.global_device;
  group->ring = g;
  group->axes.assign(g.axes.begin(), g.axes.end());
  for (int m : g.members) {
    absl::StatusOr<int> global =
        g.mesh != nullptr ? g.mesh->GlobalDevice(m) : absl::StatusOr<int>(-1);
    group->globals.push_back(global.ok() ? *global : -1);
  }
  notes->groups.push_back(std::move(group));
  return notes->groups.back().get();
}

void PublishCall(NotedGroup* group, int64_t signature, bool by_channel,
                 const std::array<int64_t, 3>& pieces) {
  Notes* notes = t_notes;
  if (group == nullptr || notes == nullptr) return;
  ++group->calls;
  group->signature = signature;
  group->by_channel = by_channel;
  group->pieces = pieces;
  notes->last = group;
  notes->own->Publish(group->key, CallWord(group->calls, by_channel), signature,
                      pieces);
}

}  // namespace meshdma::collectives_internal
