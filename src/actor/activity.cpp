// What an actor does, for whoever looks inside the job (the admin API): the endpoint running and
// since when, how many handled and how long they took. Written by the actor's own thread around
// each handler (two clock reads), read on any thread.

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>

#include "actor/cell.hpp"
#include "actor/metrics.hpp"
#include "actor/trace.hpp"

namespace baton::detail {

const std::string* interned_name(std::string_view name) {
  static std::mutex mu;
  static std::unordered_set<std::string> names;  // never shrinks: its strings outlive readers
  std::lock_guard lock(mu);
  return &*names.emplace(name).first;
}

namespace {
thread_local const EndpointInfo* t_labelled = nullptr;
}  // namespace

EndpointLabel::EndpointLabel(const EndpointInfo& base, std::string_view name) : outer_(t_labelled) {
  static std::mutex mu;
  // Never shrinks (one entry per host-language endpoint called): a message points at its entry.
  static std::map<std::pair<std::uint64_t, std::string>, EndpointInfo, std::less<>> labelled;
  std::lock_guard lock(mu);
  auto [it, fresh] = labelled.try_emplace({base.id, std::string(name)}, base);
  if (fresh) it->second.name = it->first.second;
  t_labelled = &it->second;
}

EndpointLabel::~EndpointLabel() {
  t_labelled = outer_;
}

const EndpointInfo* labelled_endpoint() {
  return t_labelled;
}

namespace {
std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void Cell::handler_began(const EndpointInfo& ep) {
  if (!observing()) return;
  // In a run of handlers back to back, the last one's end (what is between is a pop from the
  // mailbox and the last one's reply on its way) stands for this one's start.
  const std::int64_t now = std::exchange(handler_clock_ns_, 0);
  running_since_ns_.store(now != 0 ? now : now_ns(), std::memory_order_relaxed);
  running_.store(&ep, std::memory_order_release);
}

void Cell::handler_ended() {
  const EndpointInfo* ep = running_.load(std::memory_order_relaxed);
  if (ep == nullptr) return;  // began unobserved
  const std::int64_t began = running_since_ns_.load(std::memory_order_relaxed);
  const std::int64_t ended = now_ns();
  handler_clock_ns_ = ended;
  const auto took = static_cast<std::uint64_t>(std::max<std::int64_t>(0, ended - began));
  running_.store(nullptr, std::memory_order_release);
  const std::string* named = running_name_.exchange(nullptr, std::memory_order_acq_rel);
  if (tracing()) {
    // The same clock as the trace's (steady_clock is CLOCK_MONOTONIC).
    trace_span("", named != nullptr ? std::string_view(*named) : ep->name, "endpoint", &id(), began,
               ended);
    if (trace_flow_ != 0) trace_flow('f', std::exchange(trace_flow_, 0), began);
  }
  handled_.fetch_add(1, std::memory_order_relaxed);
  handler_ns_.fetch_add(took, std::memory_order_relaxed);
  if (took > max_handler_ns_.load(std::memory_order_relaxed)) {
    max_handler_ns_.store(took, std::memory_order_relaxed);  // its own thread alone writes it
  }
}

Cell::Activity Cell::activity() const {
  Activity a;
  const ActorTypeInfo* type = type_.load(std::memory_order_acquire);
  a.type = type != nullptr ? type->name : std::string_view();
  if (const std::string* t = type_name_.load(std::memory_order_acquire)) a.type = *t;
  a.handled = handled_.load(std::memory_order_relaxed);
  if (const EndpointInfo* ep = running_.load(std::memory_order_acquire)) {
    a.running = ep->name;
    if (const std::string* r = running_name_.load(std::memory_order_acquire)) a.running = *r;
    a.since_ns = running_since_ns_.load(std::memory_order_relaxed);
    a.running_s = static_cast<double>(now_ns() - a.since_ns) / 1e9;
  }
  if (a.handled > 0) {
    a.mean_ms = static_cast<double>(handler_ns_.load(std::memory_order_relaxed)) / 1e6 /
                static_cast<double>(a.handled);
  }
  a.max_ms = static_cast<double>(max_handler_ns_.load(std::memory_order_relaxed)) / 1e6;
  a.thread = thread_.load(std::memory_order_relaxed);
  return a;
}

}  // namespace baton::detail
