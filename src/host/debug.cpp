// The admin API's side of the Python debugger (see actor/debug.hpp): the actors paused in
// breakpoint() across the job, and one exchange with one of them, through its proc's agent.

#include <algorithm>
#include <chrono>
#include <tuple>

#include "actor/wait_all.hpp"
#include "mesh/agent.hpp"
#include "runtime_impl.hpp"

namespace baton {

using namespace internal;

namespace {

constexpr std::chrono::seconds kAskWait{5};

}  // namespace

std::vector<AdminDebugSession> Runtime::State::admin_debug_sessions() {
  const AdminSnapshot snap = admin_snapshot(false);
  std::vector<AdminDebugSession> out;
  for (auto& s : detail::debug_sessions()) out.push_back({snap.controller, std::move(s)});
  std::vector<std::pair<std::string, Future<std::vector<detail::DebugSession>>>> asked;
  for (const auto& p : snap.procs) {
    if (p.state != "running") continue;
    asked.emplace_back(p.name,
                       detail::agent_of(ProcId{p.name}).call(&detail::ProcAgent::debug_sessions));
  }
  detail::wait_all(
      asked, kAskWait,
      [&out](const std::string& name, std::vector<detail::DebugSession> sessions) {
        for (auto& s : sessions) out.push_back({name, std::move(s)});
      },
      // A proc that does not answer (it is ending, or stuck in native code) has none to show.
      [](const std::string&, const std::string&) {});
  std::sort(out.begin(), out.end(), [](const AdminDebugSession& a, const AdminDebugSession& b) {
    return std::tie(a.session.mesh, a.session.rank, a.proc, a.session.id) <
           std::tie(b.session.mesh, b.session.rank, b.proc, b.session.id);
  });
  return out;
}

detail::DebugOutput Runtime::State::admin_debug_io(const std::string& name, std::uint64_t session,
                                                   const std::string& line, bool send) {
  const AdminSnapshot snap = admin_snapshot(false);
  if (name == snap.controller) return detail::debug_io(session, line, send);
  const auto p = std::find_if(snap.procs.begin(), snap.procs.end(),
                              [&name](const AdminProc& x) { return x.name == name; });
  if (p == snap.procs.end()) throw AdminNotFound("no proc " + name + " in this job");
  if (p->state != "running") return {"", "gone"};
  return detail::agent_of(ProcId{name})
      .call(&detail::ProcAgent::debug_io, session, line, send)
      .get(kAskWait);
}

}  // namespace baton
