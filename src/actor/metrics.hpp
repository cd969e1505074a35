#pragma once

// Internal: a proc's metrics, for the admin API's /metrics. The proc keeps what only it can see
// (its calls' round trips by endpoint, its links' traffic, its actors' mailboxes and states);
// other layers add theirs (add_metrics_source). The controller asks every proc and writes
// Prometheus' text format, each sample labelled with its proc.

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "baton/actor/proc.hpp"

namespace baton::detail {

/// Whether this process counts what it does for whoever looks inside the job: its calls' round
/// trips, its actors' handlers (what each runs, for how long, how many), its stalls. On unless
/// BATON_OBSERVE=off (read once); off, those read as nothing happening.
bool observing();
/// Turns it on or off from now on (the benchmark of what observing costs).
void set_observing(bool on);

/// The upper bounds of the call-time histograms' buckets, in seconds (then +Inf).
inline constexpr std::array<double, 17> kCallBuckets = {
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
    50e-3, 100e-3, 250e-3, 500e-3, 1.0,  2.5,    5.0,  10.0};

/// The round trips of the calls to one endpoint: counted by bucket, any thread.
class CallHistogram {
 public:
  void observe(std::int64_t ns);
  /// Cumulative counts by bucket (the last is +Inf: all), and the sum in seconds.
  std::array<std::uint64_t, kCallBuckets.size() + 1> cumulative() const;
  double sum_s() const;

 private:
  std::array<std::atomic<std::uint64_t>, kCallBuckets.size() + 1> counts_{};
  std::atomic<std::uint64_t> sum_ns_{0};
};

/// The histograms of a proc's calls, by endpoint.
class CallTimes {
 public:
  /// The histogram of `endpoint` (made on first use; it lives as long as the proc).
  CallHistogram& of(std::string_view endpoint);
  /// The same for a name with static storage (an EndpointInfo's): the calling thread remembers
  /// the last one it asked for, so a run of calls to one endpoint takes no lock.
  CallHistogram& of_static(std::string_view endpoint);
  std::vector<std::pair<std::string, const CallHistogram*>> all() const;

 private:
  static std::uint64_t next_serial();
  // What the calling thread remembers it by: an address may be another proc's later.
  const std::uint64_t serial_ = next_serial();
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<CallHistogram>, std::less<>> by_endpoint_;
};

/// A metric family: its name, type ("counter", "gauge", "histogram") and help.
struct MetricFamily {
  std::string name;
  std::string type;
  std::string help;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(name, type, help);
  }
};

/// One sample: a family's name (with _bucket, _sum or _count for a histogram's), its labels
/// as the text format writes them inside the braces (escaped; may be empty), and its value.
struct MetricSample {
  std::string name;
  std::string labels;
  double value = 0;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(name, labels, value);
  }
};

struct ProcMetrics {
  std::vector<MetricFamily> families;
  std::vector<MetricSample> samples;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(families, samples);
  }
  /// Adds a family (once) and returns *this, to add its samples after.
  ProcMetrics& family(std::string name, std::string type, std::string help);
  void sample(std::string name, std::string labels, double value);
};

/// The kind of link a transport counts as: "host" for a unix socket or shared memory (a link
/// switches from one to the other, and a counter must not move between labels), else itself.
std::string link_kind(const std::string& transport);

/// `value` as a label's value: quoted, with \, " and newlines escaped.
std::string label(std::string_view name, std::string_view value);

/// The metrics of `proc` now, with those every source of this process adds.
ProcMetrics proc_metrics(Proc& proc);

/// A layer's own metrics (RdmaBuffer's bytes by backend, say), added to those of every proc of
/// this process from now on.
void add_metrics_source(std::function<void(Proc&, ProcMetrics&)> source);

/// Adds `times` to `m` as the histogram family `name`: one histogram per key, labelled
/// `key_label`.
void add_histograms(ProcMetrics& m, const std::string& name, const std::string& help,
                    std::string_view key_label, const CallTimes& times);

}  // namespace baton::detail
