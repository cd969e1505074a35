// The host agent's side (see hosts.hpp): a runtime that starts workers on its host for a
// controller on another, and tells that controller what they print and how they end.
#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include "actor/proc_state.hpp"
#include "host/hosts.hpp"
#include "log/log.hpp"
#include "runtime_impl.hpp"

namespace baton {
namespace internal {

HostAgent::HostAgent(std::string serve_host, std::string cache_dir, bool once)
    : serve_host_(std::move(serve_host)),
      cache_(std::make_unique<FileCache>(std::move(cache_dir))),
      once_(once) {
  // A controller that goes away takes the procs it asked for with it.
  RuntimeState& st = RuntimeAccess::state(proc());
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

Task<std::string> HostAgent::program(const HostSpawn& spec) {
  // The largest piece of a program one message carries.
  constexpr std::uint64_t kChunk = std::uint64_t{16} << 20;
  std::string why;
  if (auto path = cache_->find(spec.executable_hash, why)) co_return path->string();
  if (!is_sha256(spec.executable_hash)) {
    detail::log_warn("refused a spawn of {}: {}", spec.executable, why);
    throw std::runtime_error("host " + id().proc.name + " refuses to run " + spec.executable +
                             ": " + why);
  }
  detail::log_info("fetching {} ({} bytes) from {}: {}", spec.executable, spec.executable_size,
                   spec.client.proc.name, why);
  const ActorRef<HostClient> client(spec.client);
  std::string bytes;
  bytes.reserve(spec.executable_size);
  while (bytes.size() < spec.executable_size) {
    const std::uint64_t n = std::min<std::uint64_t>(kChunk, spec.executable_size - bytes.size());
    auto chunk = client.call(&HostClient::read_chunk, spec.executable_hash,
                             static_cast<std::uint64_t>(bytes.size()), n);
    const Bytes got = co_await chunk;
    if (got.size() == 0) break;
    bytes.append(reinterpret_cast<const char*>(got.data()), got.size());
  }
  bytes_fetched_ += bytes.size();
  try {
    co_return cache_->add(spec.executable_hash, bytes).string();
  } catch (const std::exception& e) {
    detail::log_warn("refused {} from {}: {}", spec.executable, spec.client.proc.name, e.what());
    throw;
  }
}

Task<HostProcs> HostAgent::spawn_procs(HostSpawn spec) {
  RuntimeState& st = RuntimeAccess::state(proc());
  const std::string& controller = spec.client.proc.name;
  if (once_ && first_controller_.empty()) first_controller_ = controller;
  if (once_ && (controller != first_controller_ || first_gone_)) {
    // Started for one controller (a job's launcher did): it ends with that one, and would take
    // another's procs with it.
    detail::log_warn("refused a spawn for controller {}: this agent serves {} alone (--once)",
                     controller, first_controller_);
    throw std::runtime_error("host " + id().proc.name + " was started for controller " +
                             first_controller_ +
                             " alone (baton-host --once, as a job starts its agents) and ends "
                             "with it: start an agent of your own, or one without --once, "
                             "which serves several controllers");
  }
  auto fetched = program(spec);
  const std::string path = co_await std::move(fetched);
  LaunchSpec launch;
  launch.mesh = spec.mesh;
  launch.executable = path;
  launch.args = spec.args;
  launch.env = spec.env;
  launch.serve_host = serve_host_;
  launch.owner = spec.client;
  launch.report_to = spec.client;
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
  if (once_ && peer == first_controller_) {
    // Its one controller is gone: stop everything in order and exit, as SIGTERM does.
    first_gone_ = true;
    detail::log_warn("controller {} is gone: this agent (--once) stops its procs and exits", peer);
    ::kill(::getpid(), SIGTERM);
    return;
  }
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
  RuntimeState& st = RuntimeAccess::state(proc());
  std::lock_guard lock(st.mu);
  st.output_to.erase(mesh);
}

}  // namespace internal
}  // namespace baton
