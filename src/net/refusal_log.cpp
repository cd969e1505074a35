#include "net/refusal_log.hpp"

#include <cstdio>
#include <utility>

namespace baton::net::internal {

RefusalLog::RefusalLog(std::string where, std::size_t lines, std::chrono::milliseconds window,
                       Sink sink)
    : where_(std::move(where)), lines_(lines), window_(window), sink_(std::move(sink)) {}

bool RefusalLog::refused(const std::string& reason, Clock::time_point now) {
  if (!started_ || now >= window_end()) {
    flush(now);
    started_ = true;
    start_ = now;
    logged_ = 0;
  }
  if (logged_ < lines_) {
    ++logged_;
    sink_(where_ + " refused a connection: " + reason);
    return false;
  }
  last_reason_ = reason;
  return ++held_ == 1;
}

void RefusalLog::flush(Clock::time_point now) {
  if (held_ == 0) return;
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f",
                std::chrono::duration<double>(now - start_).count());
  sink_(where_ + " refused " + std::to_string(held_) + " more connection" +
        (held_ == 1 ? "" : "s") + " in the last " + seconds + " s (last reason: " + last_reason_ +
        ")");
  held_ = 0;
}

}  // namespace baton::net::internal
