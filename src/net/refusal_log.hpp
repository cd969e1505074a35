#pragma once

// Internal: a listener's log of the connections it refused, rate-limited so that a flood of
// garbage connections cannot flood the log. Within each window at most `lines` refusals are
// logged one by one; the rest are counted, and one line sums them up when the window ends (the
// owner calls flush() then) or the listener closes. Refusing is not limited, only its lines.
// Time is passed in, so the limiter itself never reads a clock.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace baton::net::internal {

class RefusalLog {
 public:
  using Clock = std::chrono::steady_clock;
  using Sink = std::function<void(const std::string& line)>;

  /// `where` names the listener in each line.
  RefusalLog(std::string where, std::size_t lines, std::chrono::milliseconds window, Sink sink);

  /// A connection was refused at `now` for `reason`: logged, or counted for the summary. True
  /// when this is the first one held back in its window: the owner then calls flush() at
  /// window_end().
  bool refused(const std::string& reason, Clock::time_point now);
  /// Logs one line for the refusals held back since the window began, if there were any.
  void flush(Clock::time_point now);
  Clock::time_point window_end() const { return start_ + window_; }
  /// Refusals held back and not yet summed up.
  std::uint64_t held() const { return held_; }

 private:
  std::string where_;
  std::size_t lines_;
  std::chrono::milliseconds window_;
  Sink sink_;
  bool started_ = false;
  Clock::time_point start_{};
  std::size_t logged_ = 0;  // lines logged in this window
  std::uint64_t held_ = 0;  // refusals counted, not logged, in this window
  std::string last_reason_;
};

}  // namespace baton::net::internal
