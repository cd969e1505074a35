// How a thread outside actors waits for a reply: it runs the event loop its reply comes in on
// (the links of the proc that dials from this process), instead of sleeping until the I/O
// thread hands the reply over.

#include "actor/cell.hpp"
#include "actor/node.hpp"
#include "net/io_thread.hpp"

namespace baton::detail {

bool drive_until_ready(StateBase& s, const std::chrono::steady_clock::time_point* deadline) {
  if (current_cell() != nullptr || net::on_io_thread()) return false;
  const auto node = Node::current();
  Router* router = node ? node->router() : nullptr;
  const auto home = router != nullptr ? router->home() : nullptr;
  if (!home) return false;
  net::IoThread* io = nullptr;
  {
    std::lock_guard lock(home->mu);
    io = home->io.get();
  }
  if (io == nullptr) return false;
  return net::drive_until(
      *io, [&s] { return s.ready(); },
      [&s](std::function<void()> wake) { s.on_ready(std::move(wake)); }, deadline);
}

}  // namespace baton::detail
