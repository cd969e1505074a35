// The stall watch of a proc (see stall.hpp): once a second it looks at what each actor runs.

#include "mesh/stall.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "actor/cell.hpp"
#include "actor/proc_state.hpp"
#include "actor/stacks.hpp"
#include "baton/actor/errors.hpp"
#include "log/log.hpp"

namespace baton::detail {

namespace {
constexpr const char* kStallVar = "BATON_STALL_AFTER";
}  // namespace

std::optional<std::chrono::milliseconds> stall_after_from_env() {
  const char* v = std::getenv(kStallVar);
  if (v == nullptr || *v == '\0') return std::chrono::seconds(60);
  const std::string s = v;
  if (s == "off" || s == "0") return std::nullopt;
  char* end = nullptr;
  const double seconds = std::strtod(s.c_str(), &end);
  if (*end != '\0' || !(seconds > 0) || seconds > 1e7) {
    throw UsageError(std::string(kStallVar) + "=" + s +
                     " is not a number of seconds (an endpoint running longer is logged with its "
                     "stack; 60 by default, off for never)");
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

StallWatch::StallWatch(Proc& proc, std::chrono::milliseconds stall_after)
    : proc_(proc), after_(stall_after), thread_([this] { run(); }) {}

StallWatch::~StallWatch() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::size_t StallWatch::reported() const {
  std::lock_guard lock(mu_);
  return reported_;
}

void StallWatch::run() {
  // Often enough to report within a quarter of the bound, never more than once a second.
  const auto every = std::clamp<std::chrono::milliseconds>(
      after_ / 4, std::chrono::milliseconds(10), std::chrono::seconds(1));
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, every, [this] { return stopping_; })) {
    lock.unlock();
    check();
    lock.lock();
  }
}

void StallWatch::check() {
  ProcState& st = state_of(proc_);
  std::vector<CellPtr> cells;
  {
    std::lock_guard lock(st.mu);
    for (const auto& [id, cell] : st.actors) cells.push_back(cell);
  }
  const double bound_s = std::chrono::duration<double>(after_).count();
  std::map<const void*, std::int64_t> running;
  for (const auto& cell : cells) {
    const Cell::Activity a = cell->activity();
    if (a.running.empty()) continue;
    running[cell.get()] = a.since_ns;
    if (a.running_s < bound_s) continue;
    {
      std::lock_guard lock(mu_);
      const auto it = seen_.find(cell.get());
      if (it != seen_.end() && it->second == a.since_ns) continue;  // reported once already
      seen_[cell.get()] = a.since_ns;
      ++reported_;
    }
    std::string where;
    if (a.thread != 0) {
      for (const ThreadStack& t : thread_stacks()) {
        if (t.tid != a.thread) continue;
        for (std::size_t i = 0; i < t.native.size(); ++i) {
          where += fmt::format("\n  #{} {}", i, t.native[i]);
        }
        if (!t.python.empty()) where += "\n  Python (most recent call last):";
        for (const auto& frame : t.python) where += "\n    " + frame;
      }
    }
    log_warn(
        "{} has been in endpoint {} for {:.1f} s (longer than {}={:g} s; is it stuck?); the "
        "thread that runs it:{}",
        cell->id().to_string(), a.running, a.running_s, kStallVar, bound_s,
        where.empty() ? " (it waits, suspended, for a call it made)" : where);
  }
  std::lock_guard lock(mu_);
  std::erase_if(seen_, [&running](const auto& kv) { return !running.contains(kv.first); });
}

}  // namespace baton::detail
