#pragma once

// Internal: a wait for the next write of an eventfd, through the event loop's own epoll, with no
// read of the eventfd at all.
//
// A link's peer wakes this side by writing an eventfd. Asio's public waits on a descriptor cost
// two system calls per wake-up besides the epoll_wait: a read takes the count and the read Asio
// tries at once when the next one is started finds EAGAIN (async_read_some), or the count is
// read and epoll re-armed (async_wait, whose start re-arms epoll and so fires at once while the
// count is not zero). On a small virtual machine a system call costs about a microsecond, and a
// call and its reply wake two sides: four system calls more than the wake-ups need.
//
// Epoll watches each descriptor edge-triggered here, and every write of an eventfd is an edge
// of its own, whatever its count: so the count is never read (its 64 bits, one per write, never
// fill). The wait is an operation of Asio's reactor that asks nothing of the descriptor and
// says it is exhausted: the reactor then starts the next wait without trying it, until another
// edge comes; an edge that comes while no wait is armed makes the next one end at once. This
// reaches into Asio's reactor (asio::detail), whose start_op, register_descriptor,
// deregister_descriptor and cleanup_descriptor_data have kept these signatures from 1.22
// through 1.30; a new Asio that changes them fails to compile here, not at run time.

#include <memory>
#include <mutex>
#include <system_error>
#include <utility>

#include "net/asio.hpp"

#if defined(ASIO_HAS_IO_URING_AS_DEFAULT) || !defined(ASIO_HAS_EPOLL)
#error "EdgeWatch needs Asio's epoll reactor"
#endif

namespace baton::net::internal {

class EdgeWatch {
 public:
  explicit EdgeWatch(asio::io_context& ctx);
  ~EdgeWatch() { close(); }
  EdgeWatch(const EdgeWatch&) = delete;
  EdgeWatch& operator=(const EdgeWatch&) = delete;

  /// Watches `fd` (an eventfd another process writes) from now on, and owns it. An error, with
  /// `fd` closed, if epoll will not watch it.
  std::error_code assign(int fd);
  [[nodiscard]] bool is_open() const;

  /// `handler(ec)` runs once, on a thread that runs the event loop, after the next write of the
  /// descriptor (or at once, after a write that came while no wait was armed); with
  /// operation_aborted if close() comes first, and never if the event loop is destroyed first
  /// (`handler` is destroyed then). One wait at a time.
  template <class Handler>
  void async_wait(Handler handler) {
    start(new Wait<Handler>(std::move(handler)));  // NOLINT: the reactor's queue owns it till done
  }

  /// Ends the wait (operation_aborted) and closes the descriptor. Safe from any thread.
  void close();

 private:
  using Op = asio::detail::reactor_op;
  template <class Handler>
  class Wait final : public Op {
   public:
    explicit Wait(Handler handler)
        : Op(asio::error_code(), &perform, &complete), handler_(std::move(handler)) {}

   private:
    // Nothing to do on the descriptor: the edge was the news. "Exhausted": the next wait is not
    // tried before the next edge.
    static status perform(Op* /*op*/) { return done_and_exhausted; }
    // owner is null where the event loop destroys the operation unrun.
    static void complete(void* owner, asio::detail::scheduler_operation* base,
                         const asio::error_code& /*ec*/, std::size_t /*bytes*/) {
      std::unique_ptr<Wait> self(static_cast<Wait*>(base));
      Handler handler = std::move(self->handler_);
      const asio::error_code ec = self->ec_;
      self.reset();
      if (owner != nullptr) handler(ec);
    }
    Handler handler_;
  };

  void start(Op* op);

  asio::detail::reactor& reactor_;
  mutable std::mutex mu_;  // close() may come from any thread while a wait starts
  int fd_ = -1;
  asio::detail::reactor::per_descriptor_data data_{};
};

}  // namespace baton::net::internal
