#pragma once

// Internal: the controller's admin API (admin.cpp): HTTP with JSON, on the loopback by default,
// every request carrying the job's admin token. It shows what the runtime knows of the job, read
// afresh on each request through the snapshot the runtime gives it.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "actor/debug.hpp"
#include "actor/metrics.hpp"
#include "actor/stacks.hpp"
#include "actor/trace.hpp"
#include "baton/net/link.hpp"

namespace baton::internal {

/// A proc of the job as the controller sees it.
struct AdminProc {
  std::string name;
  int pid = 0;
  std::string mesh;  // the proc mesh it belongs to ("" for the controller's own)
  std::size_t rank = 0;
  std::string host;  // "" on this host, else the agent that started it
  /// "starting", "running", "stopping", "stopped" (on purpose), "exited" (on its own) or
  /// "failed" (with a report)
  std::string state;
  std::string report;  // how it ended, once it did
  // From /proc, for a proc of this host (else negative): its CPU time, memory and age.
  double cpu_s = -1;
  double rss_mb = -1;
  double uptime_s = -1;
};

/// An actor of the job, as its proc reported it.
struct AdminActor {
  std::string proc;
  std::string id;  // "proc/name[index]"
  std::string type;
  std::string status;  // "starting", "running", "stopped" or "failed"
  std::uint64_t handled = 0;
  std::uint64_t queued = 0;
  std::string running;  // the endpoint running now, "" if none
  double running_s = 0;
  double mean_ms = 0;
  double max_ms = 0;
};

/// What the runtime knows of the job at one moment.
struct AdminSnapshot {
  std::string controller;  // the controller's proc
  int controller_pid = 0;
  double uptime_s = 0;
  double stall_after_s = 0;  // an endpoint running longer is a stall (0: none is)
  double controller_cpu_s = -1;
  double controller_rss_mb = -1;
  std::vector<AdminProc> procs;
  std::uint64_t envelopes_sent = 0;   // by the controller's proc, over links
  std::vector<std::string> failures;  // reports of failures nothing handled, newest last
  /// Only when asked for (each running proc is asked): every actor, and the procs that did not
  /// answer, each with why.
  std::vector<AdminActor> actors;
  std::vector<std::pair<std::string, std::string>> unanswered;
};

/// The threads of one proc and their stacks, or why the proc did not give them.
struct AdminStacks {
  std::string proc;
  int pid = 0;
  std::vector<detail::ThreadStack> threads;
  std::string error;
};

/// One line a worker wrote.
struct AdminLogLine {
  std::string proc;
  std::string stream;     // "stdout" or "stderr"
  std::string level;      // "debug", "info", "warn" or "error"
  double time = 0;        // seconds since the epoch, when the controller read it
  std::uint64_t seq = 0;  // the line's place among all the job's lines kept (1, 2, ...)
  std::string text;
};

/// A Python actor paused in breakpoint(), and its proc.
struct AdminDebugSession {
  std::string proc;
  detail::DebugSession session;
};

/// A request names something the job does not have; what() says what it has.
class AdminNotFound : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Where the admin API reads the job and acts on it.
struct AdminSource {
  std::function<AdminSnapshot(bool with_actors)> snapshot;
  /// The stacks of every running proc (both empty), of one proc, or of the thread running one
  /// actor (`actor` its id, "proc/name[0]").
  std::function<std::vector<AdminStacks>(const std::string& proc, const std::string& actor)> stacks;
  /// The last `lines` lines of the workers (of `proc` alone if not empty) at `level` or above,
  /// after the line `since` (0: from the first kept).
  std::function<std::vector<AdminLogLine>(const std::string& proc, const std::string& level,
                                          std::size_t lines, std::uint64_t since)>
      logs;
  /// The metrics of the controller and of every running proc (one that does not answer is
  /// left out), by proc.
  std::function<std::vector<std::pair<std::string, detail::ProcMetrics>>()> metrics;
  /// Starts recording a trace in every process of the job; stops it and returns what every
  /// process recorded, as Chrome's trace format.
  std::function<void()> trace_start;
  std::function<std::string()> trace_stop;
  /// Kills the process of `proc`, as a crash would; says what it did.
  std::function<std::string(const std::string& proc)> kill;
  /// The Python actors paused in breakpoint(), by mesh and rank; one exchange with one of them
  /// (see detail::debug_io).
  std::function<std::vector<AdminDebugSession>()> debug_sessions;
  std::function<detail::DebugOutput(const std::string& proc, std::uint64_t session,
                                    const std::string& line, bool send)>
      debug_io;
};

/// Chrome's trace format (JSON, which Perfetto reads) of `events` from the procs of a job,
/// each process named by `names` (pid → proc name), with the events of `parts` (traces in the
/// same format, from procs that ended) added. `whole`: the trace of the whole job, whose flows
/// recorded at one end only (in flight when it stopped) are left out.
std::string chrome_trace_json(const std::vector<detail::TraceRecord>& events,
                              const std::vector<std::pair<int, std::string>>& names,
                              const std::vector<std::string>& parts = {}, bool whole = true);

/// The admin files in a job's directory: the token, the address the API serves, and (for an
/// API served with TLS) the CA its certificate chains to.
inline constexpr const char* kAdminTokenFile = "admin-token";
inline constexpr const char* kAdminAddressFile = "admin-address";
inline constexpr const char* kAdminCaFile = "admin-ca.pem";

/// Where BATON_ADMIN says to serve ("127.0.0.1:0" when unset; another address than the loopback
/// is served with TLS), or nullopt for "off". Throws UsageError, saying what it takes, for
/// anything else.
std::optional<std::string> admin_address_from_env();

class AdminServer {
 public:
  /// Serves on `address` ("host:port", port 0 for a free one) with a fresh token, written with
  /// the address into `dir`; throws std::runtime_error if it cannot listen there. An address
  /// other than the loopback is served with TLS only, with `tls`'s certificate (its CA written
  /// into `dir` for clients); without one, UsageError.
  AdminServer(const std::string& address, const std::filesystem::path& dir, AdminSource source,
              const net::TlsOptions& tls = {});
  /// Stops serving; a request in progress finishes first.
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  /// "http://127.0.0.1:PORT".
  const std::string& url() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton::internal
