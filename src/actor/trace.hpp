#pragma once

// Internal: the trace a process records while the job is traced (BATON_TRACE=FILE, or between
// the admin API's trace/start and trace/stop): a span for each endpoint an actor runs and for
// each envelope a link delivers, and a flow from each call or cast sent over a link to the span
// that delivered it, and on to the endpoint it ran. The controller gathers every proc's and
// writes Chrome's trace format, which Perfetto and chrome://tracing read.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "baton/wire/envelope.hpp"
#include "baton/wire/ids.hpp"

namespace baton::detail {

/// One event of the trace: a span ('X'), or a flow's start ('s') or end ('f').
struct TraceRecord {
  char phase = 'X';
  std::string name;
  std::string category;  // "endpoint", "deliver" or "send"
  std::string actor;     // the actor that ran the span, if any
  int pid = 0;
  int tid = 0;
  std::int64_t begin_ns = 0;  // CLOCK_MONOTONIC, the same for every process of a host
  std::int64_t end_ns = 0;    // spans only
  std::uint64_t flow = 0;     // flows only

  template <class Ar>
  void serialize(Ar& ar) {
    ar(phase, name, category, actor, pid, tid, begin_ns, end_ns, flow);
  }
};

/// The header that carries a flow over a link.
inline constexpr std::string_view kFlowHeader = "flow";

/// Whether this process records now (BATON_TRACE set when it started, or set_tracing).
bool tracing();
void set_tracing(bool on);

/// Now, as the trace counts time.
std::int64_t trace_now_ns();
/// A flow id no other process of the job makes (the pid in its high bits).
std::uint64_t new_flow();
/// Records a span of the calling thread, named `prefix` then `name`, both with static storage
/// (an endpoint's name), run by `actor` (null: none).
void trace_span(std::string_view prefix, std::string_view name, std::string_view category,
                const ActorId* actor, std::int64_t begin_ns, std::int64_t end_ns);
/// Records the start (`phase` 's') or end ('f') of `flow` on the calling thread, now or at `at_ns`.
void trace_flow(char phase, std::uint64_t flow, std::int64_t at_ns = 0);
/// While one lives, the calling thread is inside a span that will be recorded (an endpoint, a
/// delivery): a flow started there starts in that span.
class InSpan {
 public:
  InSpan();
  ~InSpan();
  InSpan(const InSpan&) = delete;
  InSpan& operator=(const InSpan&) = delete;
  static bool here();
};

/// Around the send of an envelope over a link: while a trace records, a new flow in its headers,
/// started in the span the thread is in, or in a span of its own ("send WHAT") around the send.
class TracedSend {
 public:
  /// `what` has static storage (an endpoint's name).
  TracedSend(Envelope& env, std::string_view what);
  ~TracedSend();
  TracedSend(const TracedSend&) = delete;
  TracedSend& operator=(const TracedSend&) = delete;

 private:
  std::string_view what_;   // static storage
  std::int64_t began_ = 0;  // of its own span, 0 if none
};

/// What this process recorded since the last call, oldest first (at most a million events
/// are kept: a trace left on drops what comes after, and says so in its last event).
std::vector<TraceRecord> take_trace();

}  // namespace baton::detail
