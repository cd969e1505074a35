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
#include "actor/wait_all.hpp"
#include "baton/actor/errors.hpp"
#include "log/log.hpp"
#include "mesh/agent.hpp"

namespace baton::detail {

namespace {

constexpr const char* kStallVar = "BATON_STALL_AFTER";

std::atomic<int> g_watches{0};  // stall watches running in this process

/// A proc's waits on other members, for its stall watch.
struct Waits {
  std::mutex mu;
  std::vector<std::weak_ptr<Waiting>> list;
};

}  // namespace

std::string gather_stall_report(const std::vector<CastMember>& base, const Slice& view,
                                std::string_view endpoint, double waited_s) {
  constexpr std::size_t kNamed = 16;  // members named at most; the rest are counted
  constexpr std::chrono::seconds kAsk{5};
  // The members, by proc: each proc is asked once for its actors.
  std::map<std::string, std::vector<std::pair<std::size_t, ActorId>>> by_proc;
  for (std::size_t rank = 0; rank < view.len(); ++rank) {
    const CastMember& m = base.at(view.location_of_rank(rank));
    by_proc[m.actor.proc.name].emplace_back(rank, m.actor);
  }
  std::vector<std::pair<std::string, Future<std::vector<ActorReport>>>> asked;
  asked.reserve(by_proc.size());
  for (const auto& [proc, members] : by_proc) {
    asked.emplace_back(proc, agent_of(ProcId{proc}).call(&ProcAgent::actors));
  }
  std::map<std::size_t, std::string> busy;  // by rank
  wait_all(
      asked, kAsk,
      [&](const std::string& proc, const std::vector<ActorReport>& reports) {
        for (const auto& [rank, member] : by_proc[proc]) {
          const ActorId& id = member;
          const auto r = std::find_if(reports.begin(), reports.end(),
                                      [&id](const ActorReport& x) { return x.id == id; });
          if (r == reports.end()) continue;  // it ended: its failure answers the gather
          if (!r->running.empty()) {
            busy[rank] = fmt::format("rank {} ({}, in {} for {:.1f} s)", rank, id.to_string(),
                                     r->running, r->running_s);
          } else if (r->queued > 0) {
            busy[rank] =
                fmt::format("rank {} ({}, {} messages queued)", rank, id.to_string(), r->queued);
          }
        }
      },
      [&](const std::string& proc, const std::string& why) {
        for (const auto& [rank, id] : by_proc[proc]) {
          busy[rank] =
              fmt::format("rank {} ({}: its proc does not answer: {})", rank, id.to_string(), why);
        }
      });
  std::string text =
      fmt::format("a {}call to {} members has waited {:.1f} s for ",
                  endpoint.empty() ? "" : std::string(endpoint) + " ", view.len(), waited_s);
  if (busy.empty()) return text + "its replies, but no member is busy now (are they on their way?)";
  text += busy.size() == 1 ? "1 member: " : fmt::format("{} members: ", busy.size());
  std::size_t named = 0;
  for (const auto& [rank, what] : busy) {
    if (named == kNamed) {
      text += fmt::format(", and {} more", busy.size() - kNamed);
      break;
    }
    text += (named++ == 0 ? "" : ", ") + what;
  }
  return text;
}

std::shared_ptr<Waiting> start_waiting(ProcState& proc,
                                       std::function<std::string(double waited_s)> report) {
  if (g_watches.load(std::memory_order_relaxed) == 0) return nullptr;
  auto w = std::make_shared<Waiting>();
  w->report = std::move(report);
  auto waits = proc.extension<Waits>();
  std::lock_guard lock(waits->mu);
  if (waits->list.size() >= 64) {  // now and then, the waits that ended leave
    std::erase_if(waits->list, [](const std::weak_ptr<Waiting>& x) {
      const auto held = x.lock();
      return !held || held->done.load();
    });
  }
  waits->list.push_back(w);
  return w;
}

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
    : proc_(proc), after_(stall_after), thread_([this] { run(); }) {
  g_watches.fetch_add(1);
}

StallWatch::~StallWatch() {
  g_watches.fetch_sub(1);
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
    check_waits();
    lock.lock();
  }
}

void StallWatch::check() {
  ProcState& st = state_of(proc_);
  const std::vector<CellPtr> cells = st.live_cells();
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

void StallWatch::check_waits() {
  const auto waits = state_of(proc_).extension<Waits>();
  std::vector<std::shared_ptr<Waiting>> overdue;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(waits->mu);
    for (const auto& weak : waits->list) {
      auto w = weak.lock();
      if (w && !w->done.load() && !w->reported.load() && now - w->since >= after_) {
        overdue.push_back(std::move(w));
      }
    }
  }
  const double bound_s = std::chrono::duration<double>(after_).count();
  for (const auto& w : overdue) {
    if (w->reported.exchange(true)) continue;
    const double waited_s = std::chrono::duration<double>(now - w->since).count();
    std::string text = w->report(waited_s);
    if (w->done.load()) continue;  // it ended while the members were asked
    {
      std::lock_guard lock(mu_);
      ++reported_;
    }
    log_warn("{} (longer than {}={:g} s; is one of them stuck?)", text, kStallVar, bound_s);
  }
}

}  // namespace baton::detail
