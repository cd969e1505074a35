#pragma once

// Internal: the controller's admin API (admin.cpp): HTTP with JSON, on the loopback by default,
// every request carrying the job's admin token. It shows what the runtime knows of the job, read
// afresh on each request through the snapshot the runtime gives it.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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
  std::vector<AdminProc> procs;
  std::uint64_t envelopes_sent = 0;   // by the controller's proc, over links
  std::vector<std::string> failures;  // reports of failures nothing handled, newest last
  /// Only when asked for (each running proc is asked): every actor, and the procs that did not
  /// answer, each with why.
  std::vector<AdminActor> actors;
  std::vector<std::pair<std::string, std::string>> unanswered;
};

/// The admin files in a job's directory: the token, and the address the API serves.
inline constexpr const char* kAdminTokenFile = "admin-token";
inline constexpr const char* kAdminAddressFile = "admin-address";

/// Where BATON_ADMIN says to serve ("127.0.0.1:0" when unset), or nullopt for "off". Throws
/// UsageError, saying what it takes, for anything else.
std::optional<std::string> admin_address_from_env();

class AdminServer {
 public:
  /// Serves on `address` ("host:port", port 0 for a free one) with a fresh token, written with
  /// the address into `dir`; throws std::runtime_error if it cannot listen there.
  AdminServer(const std::string& address, const std::filesystem::path& dir,
              std::function<AdminSnapshot(bool with_actors)> snapshot);
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
