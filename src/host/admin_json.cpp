// What the admin API writes (see admin_json.hpp): JSON bodies, Prometheus' text format, and the
// trace in Chrome's format.

#include "host/admin_json.hpp"

#include <cctype>
#include <cstdio>
#include <cstring>

namespace baton::internal {
namespace {

/// Prometheus' text format: one metric family.
void family(std::string& out, const std::string& name, const std::string& type,
            const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

std::string percent_decoded(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() &&
               std::isxdigit(static_cast<unsigned char>(s[i + 1])) != 0 &&
               std::isxdigit(static_cast<unsigned char>(s[i + 2])) != 0) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

/// The procs' own metrics, each sample labelled with its proc, grouped by family as the format
/// asks.
void procs_metrics_text(std::string& out,
                        const std::vector<std::pair<std::string, detail::ProcMetrics>>& procs) {
  std::vector<const detail::MetricFamily*> families;
  std::map<std::string, std::string> lines;  // by family
  for (const auto& [proc, m] : procs) {
    for (const auto& f : m.families) {
      if (lines.try_emplace(f.name).second) families.push_back(&f);
    }
  }
  for (const auto& [proc, m] : procs) {
    const std::string proc_label = detail::label("proc", proc);
    for (const auto& sm : m.samples) {
      std::string name = sm.name;
      auto it = lines.find(name);
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        if (it != lines.end()) break;
        if (name.ends_with(suffix))
          it = lines.find(name.substr(0, name.size() - std::strlen(suffix)));
      }
      if (it == lines.end()) continue;  // a sample of no family: not valid text
      char value[40];
      std::snprintf(value, sizeof value, "%.17g", sm.value);
      it->second += name + "{" + proc_label + (sm.labels.empty() ? "" : "," + sm.labels) + "} " +
                    value + "\n";
    }
  }
  for (const auto* f : families) {
    family(out, f->name, f->type, f->help);
    out += lines[f->name];
  }
}

std::string metrics_text(const AdminSnapshot& s) {
  std::string out;
  family(out, "baton_up", "gauge", "1 while the job's controller serves this API.");
  out += "baton_up 1\n";
  family(out, "baton_uptime_seconds", "gauge", "Seconds since the controller's runtime started.");
  out += "baton_uptime_seconds " + std::to_string(s.uptime_s) + "\n";
  family(out, "baton_procs", "gauge", "The job's worker procs, by state.");
  for (const char* state : {"starting", "running", "stopping", "stopped", "exited", "failed"}) {
    std::size_t n = 0;
    for (const auto& p : s.procs) n += p.state == state ? 1 : 0;
    out += std::string("baton_procs{state=\"") + state + "\"} " + std::to_string(n) + "\n";
  }
  family(out, "baton_envelopes_sent_total", "counter",
         "Messages the controller's proc sent over links.");
  out += "baton_envelopes_sent_total " + std::to_string(s.envelopes_sent) + "\n";
  family(out, "baton_unhandled_failures_total", "counter",
         "Failures that reached the controller with nothing to handle them.");
  out += "baton_unhandled_failures_total " + std::to_string(s.failures.size()) + "\n";
  return out;
}

Target split_target(std::string_view target) {
  Target t;
  const auto q = target.find('?');
  t.path = percent_decoded(target.substr(0, q));
  if (q == std::string_view::npos) return t;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    const auto eq = pair.find('=');
    t.query[percent_decoded(pair.substr(0, eq))] =
        eq == std::string_view::npos ? "" : percent_decoded(pair.substr(eq + 1));
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
  }
  return t;
}

std::string param(const Target& t, const std::string& name) {
  const auto it = t.query.find(name);
  return it == t.query.end() ? "" : it->second;
}

nlohmann::json stacks_json(const std::vector<AdminStacks>& procs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : procs) {
    nlohmann::json threads = nlohmann::json::array();
    for (const auto& t : p.threads) {
      threads.push_back({{"tid", t.tid},
                         {"name", t.name},
                         {"actors", t.actors},
                         {"native", t.native},
                         {"python", t.python},
                         {"note", t.note}});
    }
    nlohmann::json j = {{"proc", p.proc}, {"pid", p.pid}, {"threads", threads}};
    if (!p.error.empty()) j["error"] = p.error;
    out.push_back(std::move(j));
  }
  return out;
}

nlohmann::json logs_json(const std::vector<AdminLogLine>& lines) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& l : lines) {
    out.push_back({{"proc", l.proc},
                   {"stream", l.stream},
                   {"level", l.level},
                   {"time", l.time},
                   {"seq", l.seq},
                   {"text", l.text}});
  }
  return out;
}

nlohmann::json procs_json(const AdminSnapshot& s) {
  nlohmann::json procs = nlohmann::json::array();
  procs.push_back({{"name", s.controller},
                   {"pid", s.controller_pid},
                   {"mesh", ""},
                   {"rank", 0},
                   {"host", ""},
                   {"state", "running"},
                   {"controller", true},
                   {"cpu_s", s.controller_cpu_s},
                   {"rss_mb", s.controller_rss_mb},
                   {"uptime_s", s.uptime_s}});
  for (const auto& p : s.procs) {
    nlohmann::json j = {{"name", p.name},     {"pid", p.pid},   {"mesh", p.mesh},
                        {"rank", p.rank},     {"host", p.host}, {"state", p.state},
                        {"controller", false}};
    if (!p.report.empty()) j["report"] = p.report;
    // Known for the procs of this host only.
    if (p.cpu_s >= 0) j["cpu_s"] = p.cpu_s;
    if (p.rss_mb >= 0) j["rss_mb"] = p.rss_mb;
    if (p.uptime_s >= 0) j["uptime_s"] = p.uptime_s;
    procs.push_back(std::move(j));
  }
  return procs;
}

std::string chrome_trace_json(const std::vector<detail::TraceRecord>& events,
                              const std::vector<std::pair<int, std::string>>& names,
                              const std::vector<std::string>& parts, bool whole) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& [pid, name] : names) {
    all.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", name}}}});
  }
  for (const auto& e : events) {
    nlohmann::json j = {{"ph", std::string(1, e.phase)},
                        {"name", e.name},
                        {"cat", e.category},
                        {"pid", e.pid},
                        {"tid", e.tid},
                        {"ts", static_cast<double>(e.begin_ns) / 1e3}};
    if (e.phase == 'X') {
      j["dur"] = static_cast<double>(e.end_ns - e.begin_ns) / 1e3;
      if (!e.actor.empty()) j["args"] = {{"actor", e.actor}};
    } else {
      j["id"] = e.flow;
      if (e.phase == 'f') j["bp"] = "e";  // ends in the span it falls in, as it starts in one
    }
    all.push_back(std::move(j));
  }
  for (const auto& part : parts) {
    nlohmann::json parsed;
    try {
      parsed = nlohmann::json::parse(part);
      (void)parsed.at("traceEvents");
    } catch (const std::exception&) {
      continue;  // a part its proc did not finish writing (killed): the rest of the trace stands
    }
    for (auto& e : parsed.at("traceEvents")) {
      if (e.at("ph") != "M") all.push_back(std::move(e));  // the controller names every proc
    }
  }
  nlohmann::json out = nlohmann::json::array();
  if (whole) {
    // A flow recorded at one end only (in flight when the trace stopped) is left out.
    std::map<std::uint64_t, int> ends;
    for (const auto& e : all) {
      if (e.at("ph") == "s") ends[e.at("id").get<std::uint64_t>()] |= 1;
      if (e.at("ph") == "f") ends[e.at("id").get<std::uint64_t>()] |= 2;
    }
    for (auto& e : all) {
      const bool flow = e.at("ph") == "s" || e.at("ph") == "f";
      if (!flow || ends[e.at("id").get<std::uint64_t>()] == 3) out.push_back(std::move(e));
    }
  } else {
    out = std::move(all);
  }
  return nlohmann::json{{"traceEvents", out}, {"displayTimeUnit", "ns"}}.dump() + "\n";
}

}  // namespace baton::internal
