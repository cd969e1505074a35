#pragma once

// Internal: what the admin API writes (admin_json.cpp): its JSON bodies (nlohmann::json), the
// job's metrics in Prometheus' text format, and a request's target read into its parts. For
// admin.cpp alone.

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/admin.hpp"

namespace baton::internal {

/// A request's target split into its path and its query's parameters, percent-decoded.
struct Target {
  std::string path;
  std::map<std::string, std::string> query;
};
Target split_target(std::string_view target);
/// The query parameter `name`, "" if it is not there.
std::string param(const Target& t, const std::string& name);

/// The job's own metrics (procs by state, failures, ...), in Prometheus' text format.
std::string metrics_text(const AdminSnapshot& s);
/// The procs' own metrics, each sample labelled with its proc, added to `out`.
void procs_metrics_text(std::string& out,
                        const std::vector<std::pair<std::string, detail::ProcMetrics>>& procs);

nlohmann::json stacks_json(const std::vector<AdminStacks>& procs);
nlohmann::json logs_json(const std::vector<AdminLogLine>& lines);
/// The controller first, then every worker proc.
nlohmann::json procs_json(const AdminSnapshot& s);

}  // namespace baton::internal
