// The trace this process records (see trace.hpp): events appended under one lock, only while
// a trace records; a relaxed load is all it costs otherwise.

#include "actor/trace.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <utility>

#include "actor/stacks.hpp"

namespace baton::detail {

namespace {

constexpr std::size_t kMaxEvents = 1'000'000;

/// An event as recorded: static names and a copied id, made into a TraceRecord when taken.
struct Raw {
  char phase;
  std::string_view prefix;
  std::string_view name;
  std::string_view category;
  bool has_actor;
  ActorId actor;
  int tid;
  std::int64_t begin_ns;
  std::int64_t end_ns;
  std::uint64_t flow;
};

struct Recorder {
  const int pid = static_cast<int>(::getpid());
  std::atomic<bool> on{std::getenv("BATON_TRACE") != nullptr &&
                       *std::getenv("BATON_TRACE") != '\0'};
  std::atomic<std::uint64_t> next_flow{1};
  std::mutex mu;
  std::vector<Raw> events;    // under mu
  std::uint64_t dropped = 0;  // under mu
};

Recorder& recorder() {
  static Recorder r;  // the process's, as its threads are
  return r;
}

void add(Raw e) {
  Recorder& r = recorder();
  std::lock_guard lock(r.mu);
  if (r.events.size() >= kMaxEvents) {
    ++r.dropped;
    return;
  }
  r.events.push_back(std::move(e));
}

}  // namespace

bool tracing() {
  return recorder().on.load(std::memory_order_relaxed);
}

void set_tracing(bool on) {
  recorder().on.store(on, std::memory_order_relaxed);
}

std::int64_t trace_now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::uint64_t new_flow() {
  return (static_cast<std::uint64_t>(recorder().pid) << 32) |
         (recorder().next_flow.fetch_add(1, std::memory_order_relaxed) & 0xffffffffU);
}

void trace_span(std::string_view prefix, std::string_view name, std::string_view category,
                const ActorId* actor, std::int64_t begin_ns, std::int64_t end_ns) {
  add({'X', prefix, name, category, actor != nullptr, actor != nullptr ? *actor : ActorId{},
       this_thread_id(), begin_ns, end_ns, 0});
}

void trace_flow(char phase, std::uint64_t flow, std::int64_t at_ns) {
  add({phase, "", "call", "flow", false, ActorId{}, this_thread_id(),
       at_ns != 0 ? at_ns : trace_now_ns(), 0, flow});
}

namespace {
thread_local int t_span_depth = 0;
}  // namespace

InSpan::InSpan() {
  ++t_span_depth;
}

InSpan::~InSpan() {
  --t_span_depth;
}

bool InSpan::here() {
  return t_span_depth > 0;
}

TracedSend::TracedSend(Envelope& env, std::string_view what) {
  if (!tracing()) return;
  const std::uint64_t flow = new_flow();
  env.headers.emplace_back(std::string(kFlowHeader), std::to_string(flow));
  if (!InSpan::here()) {
    began_ = trace_now_ns();
    what_ = what;  // static storage: an endpoint's name, or a literal
  }
  trace_flow('s', flow, began_);
}

TracedSend::~TracedSend() {
  if (began_ != 0) trace_span("send ", what_, "send", nullptr, began_, trace_now_ns());
}

std::vector<TraceRecord> take_trace() {
  Recorder& r = recorder();
  std::vector<Raw> raw;
  std::uint64_t dropped = 0;
  {
    std::lock_guard lock(r.mu);
    raw.swap(r.events);
    dropped = std::exchange(r.dropped, 0);
  }
  std::vector<TraceRecord> out;
  out.reserve(raw.size() + 1);
  for (const Raw& e : raw) {
    std::string name(e.prefix);
    name += e.name;
    out.push_back({e.phase, std::move(name), std::string(e.category),
                   e.has_actor ? e.actor.to_string() : std::string(), r.pid, e.tid, e.begin_ns,
                   e.end_ns, e.flow});
  }
  if (dropped > 0) {
    const std::int64_t now = trace_now_ns();
    out.push_back({'X', "trace full: " + std::to_string(dropped) + " events dropped", "trace", "",
                   r.pid, this_thread_id(), now, now, 0});
  }
  return out;
}

}  // namespace baton::detail
