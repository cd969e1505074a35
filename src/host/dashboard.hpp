#pragma once

// Internal: the files of the job's web dashboard (src/host/dashboard/), compiled in by
// cmake/embed.cmake, which the admin API serves at / and beside it.

#include <cstddef>
#include <iterator>

namespace baton::internal {

struct DashboardFile {
  const char* path;  // "/" for the page, "/dashboard.js" for its script
  const char* type;  // its Content-Type
  const char* text;
};

extern const DashboardFile kDashboardFiles[];
extern const std::size_t kDashboardFileCount;

/// Where Debian's libjs-chart.js puts Chart.js, which the page loads as /js/chart.min.js.
inline constexpr const char* kChartJs = "/usr/share/javascript/chart.js/chart.min.js";

}  // namespace baton::internal
