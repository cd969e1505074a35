// A proc's metrics (see metrics.hpp): its calls' histograms, its links' traffic, its actors.

#include "actor/metrics.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "actor/cell.hpp"
#include "actor/proc_state.hpp"
#include "actor/remote_impl.hpp"
#include "net/counters.hpp"

namespace baton::detail {

namespace {
std::atomic<bool>& observe_flag() {
  static std::atomic<bool> on = [] {
    const char* v = std::getenv("BATON_OBSERVE");
    return !(v != nullptr && (std::string_view(v) == "off" || std::string_view(v) == "0"));
  }();
  return on;
}
}  // namespace

bool observing() {
  return observe_flag().load(std::memory_order_relaxed);
}

void set_observing(bool on) {
  observe_flag().store(on, std::memory_order_relaxed);
}

void CallHistogram::observe(std::int64_t ns) {
  const double s = static_cast<double>(ns) / 1e9;
  const auto at = std::lower_bound(kCallBuckets.begin(), kCallBuckets.end(), s);
  counts_[static_cast<std::size_t>(at - kCallBuckets.begin())].fetch_add(1,
                                                                         std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<std::uint64_t>(std::max<std::int64_t>(ns, 0)),
                    std::memory_order_relaxed);
}

std::array<std::uint64_t, kCallBuckets.size() + 1> CallHistogram::cumulative() const {
  std::array<std::uint64_t, kCallBuckets.size() + 1> out{};
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    out[i] = total;
  }
  return out;
}

double CallHistogram::sum_s() const {
  return static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
}

CallHistogram& CallTimes::of(std::string_view endpoint) {
  std::lock_guard lock(mu_);
  auto it = by_endpoint_.find(endpoint);
  if (it == by_endpoint_.end()) {
    it = by_endpoint_.emplace(std::string(endpoint), std::make_unique<CallHistogram>()).first;
  }
  return *it->second;
}

std::uint64_t CallTimes::next_serial() {
  static std::atomic<std::uint64_t> serial{0};
  return ++serial;
}

CallHistogram& CallTimes::of_static(std::string_view endpoint) {
  struct Last {
    std::uint64_t times = 0;
    const char* name = nullptr;
    std::size_t size = 0;
    CallHistogram* histogram = nullptr;
  };
  thread_local Last last;
  if (last.times != serial_ || last.name != endpoint.data() || last.size != endpoint.size()) {
    last = {serial_, endpoint.data(), endpoint.size(), &of(endpoint)};
  }
  return *last.histogram;
}

std::vector<std::pair<std::string, const CallHistogram*>> CallTimes::all() const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, const CallHistogram*>> out;
  out.reserve(by_endpoint_.size());
  for (const auto& [name, h] : by_endpoint_) out.emplace_back(name, h.get());
  return out;
}

ProcMetrics& ProcMetrics::family(std::string name, std::string type, std::string help) {
  const bool known = std::any_of(families.begin(), families.end(),
                                 [&name](const MetricFamily& f) { return f.name == name; });
  if (!known) families.push_back({std::move(name), std::move(type), std::move(help)});
  return *this;
}

void ProcMetrics::sample(std::string name, std::string labels, double value) {
  samples.push_back({std::move(name), std::move(labels), value});
}

std::string link_kind(const std::string& transport) {
  return transport == "unix" || transport == "shm" ? "host" : transport;
}

std::string label(std::string_view name, std::string_view value) {
  std::string out(name);
  out += "=\"";
  for (const char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

namespace {

struct Sources {
  std::mutex mu;
  std::vector<std::function<void(Proc&, ProcMetrics&)>> all;
};
Sources& sources() {
  static Sources s;  // code that registers itself, as the cast handler does
  return s;
}

void add_links(ProcState& st, ProcMetrics& m) {
  std::map<std::string, net::LinkCounters> by_kind = st.retired_traffic();
  {
    remote::RemoteRouter& r = remote::router_of(*st.node);
    std::lock_guard lock(r.routes_mu);
    for (const auto& [peer, route] : r.routes) {
      if (route.local.lock().get() != &st || !route.link) continue;
      net::LinkCounters& k = by_kind[link_kind(route.link->transport())];
      const net::LinkCounters c = net::counters_of(*route.link);
      k.sent_messages += c.sent_messages;
      k.sent_bytes += c.sent_bytes;
      k.received_messages += c.received_messages;
      k.received_bytes += c.received_bytes;
    }
  }
  struct Counter {
    const char* name;
    const char* help;
    std::uint64_t net::LinkCounters::*field;
  };
  static constexpr Counter kCounters[] = {
      {"baton_messages_sent_total", "Messages this proc sent over links, by kind of link.",
       &net::LinkCounters::sent_messages},
      {"baton_bytes_sent_total", "Bytes of the messages this proc sent over links.",
       &net::LinkCounters::sent_bytes},
      {"baton_messages_received_total", "Messages this proc received over links.",
       &net::LinkCounters::received_messages},
      {"baton_bytes_received_total", "Bytes of the messages this proc received over links.",
       &net::LinkCounters::received_bytes}};
  for (const Counter& c : kCounters) {
    m.family(c.name, "counter", c.help);
    for (const auto& [kind, counts] : by_kind) {
      m.sample(c.name, label("link", kind), static_cast<double>(counts.*c.field));
    }
  }
}

void add_calls(ProcState& st, ProcMetrics& m) {
  add_histograms(
      m, "baton_call_duration_seconds",
      "Round trips of the calls this proc made, by endpoint: to an actor of another process, or to "
      "a mesh (until every member replied, or the fold of a reduce came back).",
      "endpoint", st.call_times);
}

void add_actors(ProcState& st, ProcMetrics& m) {
  const std::vector<CellPtr> cells = st.live_cells();
  static constexpr const char* kStatus[] = {"starting", "running", "stopped", "failed"};
  std::map<std::string, std::size_t> by_status;
  for (const char* s : kStatus) by_status[s] = 0;
  m.family("baton_mailbox_messages", "gauge", "Messages waiting in each actor's mailbox.");
  for (const auto& cell : cells) {
    ++by_status[kStatus[static_cast<std::size_t>(cell->status())]];
    m.sample("baton_mailbox_messages", label("actor", cell->id().to_string()),
             static_cast<double>(cell->queued()));
  }
  m.family("baton_messages_handled_total", "counter",
           "Calls and messages each actor's endpoints handled.");
  for (const auto& cell : cells) {
    m.sample("baton_messages_handled_total", label("actor", cell->id().to_string()),
             static_cast<double>(cell->activity().handled));
  }
  m.family("baton_actors", "gauge", "The proc's actors, by status.");
  for (const auto& [status, n] : by_status) {
    m.sample("baton_actors", label("status", status), static_cast<double>(n));
  }
}

}  // namespace

void add_histograms(ProcMetrics& m, const std::string& name, const std::string& help,
                    std::string_view key_label, const CallTimes& times) {
  m.family(name, "histogram", help);
  for (const auto& [key, h] : times.all()) {
    const auto counts = h->cumulative();
    const std::string k = label(key_label, key);
    for (std::size_t i = 0; i < counts.size(); ++i) {
      char le[32];
      if (i < kCallBuckets.size()) {
        std::snprintf(le, sizeof le, "%g", kCallBuckets[i]);
      } else {
        std::snprintf(le, sizeof le, "+Inf");
      }
      m.sample(name + "_bucket", k + "," + label("le", le), static_cast<double>(counts[i]));
    }
    m.sample(name + "_sum", k, h->sum_s());
    m.sample(name + "_count", k, static_cast<double>(counts.back()));
  }
}

ProcMetrics proc_metrics(Proc& proc) {
  ProcState& st = state_of(proc);
  ProcMetrics m;
  add_calls(st, m);
  add_links(st, m);
  add_actors(st, m);
  std::vector<std::function<void(Proc&, ProcMetrics&)>> more;
  {
    std::lock_guard lock(sources().mu);
    more = sources().all;
  }
  for (const auto& source : more) source(proc, m);
  return m;
}

void add_metrics_source(std::function<void(Proc&, ProcMetrics&)> source) {
  std::lock_guard lock(sources().mu);
  sources().all.push_back(std::move(source));
}

}  // namespace baton::detail
