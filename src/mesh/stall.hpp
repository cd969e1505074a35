#pragma once

// Internal: the stall watch of a proc. An endpoint that runs longer than the job's stall_after
// is logged once, with the actor, the endpoint, how long, and the stack of the thread that runs
// it; so is a wait on other members (a gather at its root, a collective on a rank), with the
// members it still waits for: a hang is visible without anyone asking.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "baton/actor/proc.hpp"
#include "baton/mesh/cast.hpp"
#include "baton/slice/slice.hpp"

namespace baton::detail {

class ProcState;

/// BATON_STALL_AFTER in seconds (60 when unset; 0 or off: never). Throws UsageError, saying what
/// it takes, for anything else.
std::optional<std::chrono::milliseconds> stall_after_from_env();

/// A wait of a proc on other members. Once it has waited longer than the bound, the proc's
/// stall watch logs `report(seconds waited)` once (it may take a few seconds: it asks the
/// members), unless `done` is set by then.
struct Waiting {
  std::function<std::string(double waited_s)> report;
  std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
  std::atomic<bool> done{false};
  std::atomic<bool> reported{false};
};

/// Registers a wait of `proc` for its stall watch, while the handle lives and until its `done`
/// is set; null (and nothing else done) when no stall watch runs in this process.
std::shared_ptr<Waiting> start_waiting(ProcState& proc,
                                       std::function<std::string(double waited_s)> report);

/// What a gather (a mesh call, reduce or stream) that has waited `waited_s` at its root says:
/// the members of `view` still busy, each member's proc asked for its actors (a few seconds at
/// most), with what each runs. `endpoint` names the call ("" if unknown).
std::string gather_stall_report(const std::vector<CastMember>& base, const Slice& view,
                                std::string_view endpoint, double waited_s);

class StallWatch {
 public:
  /// Watches the actors of `proc` (which outlives the watch) on a thread of its own.
  StallWatch(Proc& proc, std::chrono::milliseconds stall_after);
  ~StallWatch();
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  /// Endpoints reported so far (for tests).
  std::size_t reported() const;

 private:
  void run();
  void check();
  void check_waits();

  Proc& proc_;
  const std::chrono::milliseconds after_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::size_t reported_ = 0;
  std::map<const void*, std::int64_t> seen_;  // cell → the start of the run already reported
  std::thread thread_;
};

}  // namespace baton::detail
