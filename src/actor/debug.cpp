// The hook through which the Python extension module shows its paused actors (see debug.hpp).

#include "actor/debug.hpp"

#include <mutex>
#include <utility>

namespace baton::detail {
namespace {

constexpr int kWaitMs = 500;  // a request of the admin API waits no longer: the client asks again

std::mutex& hook_mu() {
  static std::mutex mu;
  return mu;
}

Debugger& hook() {
  static Debugger h;
  return h;
}

Debugger current() {
  const std::lock_guard lock(hook_mu());
  return hook();
}

}  // namespace

void set_debugger(Debugger h) {
  const std::lock_guard lock(hook_mu());
  hook() = std::move(h);
}

std::vector<DebugSession> debug_sessions() {
  const Debugger h = current();
  return h.sessions ? h.sessions() : std::vector<DebugSession>{};
}

DebugOutput debug_io(std::uint64_t id, const std::string& line, bool send) {
  const Debugger h = current();
  if (!h.io) return {"", "gone"};
  return h.io(id, line, send, kWaitMs);
}

void debug_quit_all() {
  const Debugger h = current();
  if (h.quit_all) h.quit_all();
}

}  // namespace baton::detail
