#include "net/edge_watch.hpp"

#include <unistd.h>

namespace baton::net::internal {

EdgeWatch::EdgeWatch(asio::io_context& ctx)
    : reactor_(
          asio::use_service<asio::detail::reactor>(static_cast<asio::execution_context&>(ctx))) {
  reactor_.init_task();  // the loop runs epoll from now on (as Asio's own I/O objects ask)
}

std::error_code EdgeWatch::assign(int fd) {
  std::lock_guard lock(mu_);
  if (fd_ >= 0) {
    ::close(fd);
    return std::make_error_code(std::errc::device_or_resource_busy);
  }
  if (const int error = reactor_.register_descriptor(fd, data_); error != 0) {
    reactor_.cleanup_descriptor_data(data_);
    ::close(fd);
    return {error, std::system_category()};
  }
  fd_ = fd;
  return {};
}

bool EdgeWatch::is_open() const {
  std::lock_guard lock(mu_);
  return fd_ >= 0;
}

void EdgeWatch::start(Op* op) {
  std::lock_guard lock(mu_);
  if (fd_ < 0) {
    op->ec_ = asio::error::bad_descriptor;
    reactor_.post_immediate_completion(op, false);
    return;
  }
  reactor_.start_op(asio::detail::reactor::read_op, fd_, data_, op, false, true);
}

void EdgeWatch::close() {
  std::lock_guard lock(mu_);
  if (fd_ < 0) return;
  // Taken out of epoll before the close: the peer holds the same eventfd, so closing ours alone
  // would leave it watched.
  reactor_.deregister_descriptor(fd_, data_, false);
  ::close(fd_);
  reactor_.cleanup_descriptor_data(data_);
  fd_ = -1;
}

}  // namespace baton::net::internal
