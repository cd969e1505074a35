// The host agent's side (see hosts.hpp): a runtime that starts workers on its host for a
// controller on another, and tells that controller what they print and how they end.
#include <unistd.h>

#include "actor/cell.hpp"
#include "host/hosts.hpp"
#include "log/log.hpp"
#include "runtime_impl.hpp"

namespace baton {
namespace internal {

HostAgent::HostAgent(std::string serve_host) : serve_host_(std::move(serve_host)) {
  // A controller that goes away takes the procs it asked for with it.
  RuntimeState& st = RuntimeAccess::state(Runtime::get());
  std::lock_guard lock(st.mu);
  st.peer_lost = [me = self<HostAgent>()](const std::string& peer) {
    me.send(&HostAgent::controller_lost, peer);
  };
}

std::string HostAgent::hello() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return id().proc.name + " on " + host;
}

Task<HostProcs> HostAgent::spawn_procs(HostSpawn spec) {
  RuntimeState& st = RuntimeAccess::state(Runtime::get());
  LaunchSpec launch;
  launch.mesh = spec.mesh;
  launch.executable = spec.executable;
  launch.args = spec.args;
  launch.env = spec.env;
  launch.serve_host = serve_host_;
  launch.owner = spec.client;
  launch.report_to = spec.client;
  if (::access(spec.executable.c_str(), X_OK) != 0) {
    throw std::runtime_error("host " + id().proc.name + " cannot run " + spec.executable +
                             ": it is not an executable file there");
  }
  {
    std::lock_guard lock(st.mu);
    st.output_to[spec.mesh] = spec.client;
  }
  auto started = st.spawn(Shape::of(spec.dims), launch);
  ProcMesh procs = co_await started;
  HostProcs out;
  out.group = next_group_++;
  for (std::size_t r = 0; r < procs.size(); ++r) {
    out.names.push_back(procs.proc(r).name);
    out.addresses.push_back(detail::address_text(procs.proc(r)));
  }
  groups_.emplace(out.group, Group{std::move(procs), spec.client, spec.mesh});
  co_return out;
}

Task<int> HostAgent::stop_procs(std::uint64_t group, std::int64_t grace_ms) {
  auto it = groups_.find(group);
  if (it == groups_.end()) co_return 0;  // stopped already (its controller went away)
  Group g = std::move(it->second);
  groups_.erase(it);
  auto stopped = g.procs.stop(std::chrono::milliseconds(grace_ms));
  co_await stopped;
  forget_output(g.mesh);
  // The group's last handle goes on the thread that completed its stop, not on this actor.
  stopped.state()->on_ready([keep = std::move(g.procs)] {});
  co_return 0;
}

void HostAgent::controller_lost(std::string peer) {
  for (auto it = groups_.begin(); it != groups_.end();) {
    if (it->second.client.proc.name != peer) {
      ++it;
      continue;
    }
    detail::log_warn("controller {} is gone: stopping the procs of {} it started here", peer,
                     it->second.mesh);
    // The group's last handle goes once the stop is over, on the thread that ends it: dropped
    // here it would wait for the stop on this actor.
    auto stopped = it->second.procs.stop();
    stopped.state()->on_ready([keep = std::move(it->second.procs)] {});
    forget_output(it->second.mesh);
    it = groups_.erase(it);
  }
}

void HostAgent::forget_output(const std::string& mesh) {
  RuntimeState& st = RuntimeAccess::state(Runtime::get());
  std::lock_guard lock(st.mu);
  st.output_to.erase(mesh);
}

}  // namespace internal
}  // namespace baton
