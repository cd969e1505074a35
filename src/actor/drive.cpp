// How a thread outside actors waits for a reply: it runs the event loop its reply comes in on
// (the links of the proc that carried the call, else of the proc that dials from this process),
// instead of sleeping until the I/O thread hands the reply over.

#include "actor/cell.hpp"
#include "actor/node.hpp"
#include "net/io_thread.hpp"
#include "net/wake_ups.hpp"

namespace baton::detail {

bool drive_while_waiting(const std::shared_ptr<void>& route, const std::function<bool()>& done,
                         const std::function<void(std::function<void()>)>& when_done,
                         const std::chrono::steady_clock::time_point* deadline) {
  net::internal::ring_held_wake_ups();  // a peer not yet woken may be what this waits for
  if (current_cell() != nullptr || net::on_io_thread()) return false;
  auto proc = std::static_pointer_cast<ProcState>(route);
  if (!proc) {
    const auto node = Node::current();
    Router* router = node ? node->router() : nullptr;
    proc = router != nullptr ? router->home() : nullptr;
  }
  if (!proc) return false;
  net::IoThread* io = nullptr;
  {
    std::lock_guard lock(proc->mu);
    io = proc->io.get();
  }
  if (io == nullptr) return false;
  return net::drive_until(*io, done, when_done, deadline);
}

bool drive_until_ready(StateBase& s, const std::chrono::steady_clock::time_point* deadline) {
  return drive_while_waiting(
      s.reply_route(), [&s] { return s.ready(); },
      [&s](std::function<void()> wake) { s.on_ready(std::move(wake)); }, deadline);
}

}  // namespace baton::detail
