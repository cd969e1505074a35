#pragma once

// Internal: the stall watch of a proc. An endpoint that runs longer than the job's stall_after
// is logged once, with the actor, the endpoint, how long, and the stack of the thread that runs
// it, so that a hang is visible without anyone asking.

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "baton/actor/proc.hpp"

namespace baton::detail {

/// BATON_STALL_AFTER in seconds (60 when unset; 0 or off: never). Throws UsageError, saying what
/// it takes, for anything else.
std::optional<std::chrono::milliseconds> stall_after_from_env();

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
