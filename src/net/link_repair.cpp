// Heartbeats, and a broken connection: repaired (the dialler redials with backoff, the listener
// waits for the peer), or closed for good.

#include "net/auth.hpp"
#include "net/link_impl.hpp"

namespace baton::net::internal {

void StreamLink::arm_heartbeat() {
  timer_.expires_after(options_.heartbeat);
  timer_.async_wait([self = shared()](asio::error_code ec) {
    if (ec || self->closed()) return;
    self->serve_missed_wakeup();
    if (self->connected() && !self->parked_ &&
        Clock::now() - self->last_recv_ > self->options_.dead_after && !self->excuse_silence()) {
      self->broken(self->epoch_, asio::error::timed_out);
    } else if (self->connected()) {
      self->send_ack();  // the heartbeat, acknowledging what arrived
    }
    self->arm_heartbeat();
  });
}

bool StreamLink::shm_read_sleeps() const {
  return shm_ && shm_->reading && shm_->read_op.pending && !shm_->read_op.handler;
}

bool StreamLink::unread_input() {
  if (shm_ && shm_->reading) return shm_->in.readable() > 0;
  std::lock_guard lock(mu_);
  asio::error_code ec;
  return socket_.is_open() && socket_.available(ec) > 0 && !ec;
}

/// The peer's frames wait unread while the link looks silent: this side was too busy to read
/// them (a long stall of its own), and the peer is not silent. Excused once: a second time with
/// nothing read in between is a reader that stopped, and the link breaks as a silent one would.
bool StreamLink::excuse_silence() {
  if (!unread_input() || excused_at_ == last_recv_) return false;
  log_line(options_, detail::LogLevel::warn,
           "link " + description_ + ": the peer's frames waited unread for over " +
               std::to_string(options_.dead_after.count()) +
               " ms (this process was too busy to read them); reading them, not closing");
  last_recv_ = coarse_now();
  excused_at_ = last_recv_;
  if (shm_read_sleeps()) serve_read();
  return true;
}

/// A shared-memory read that has waited for the peer's wake-up across a whole heartbeat with
/// the peer's bytes in the ring missed that wake-up: said, and the read served, so that a lost
/// doorbell costs a heartbeat, not the link.
void StreamLink::serve_missed_wakeup() {
  if (!shm_read_sleeps() || shm_->in.readable() == 0) {
    if (shm_) shm_->stuck_at.reset();
    return;
  }
  Shm& s = *shm_;
  if (s.stuck_at != s.in.position()) {
    s.stuck_at = s.in.position();  // it may be on its way: look again at the next heartbeat
    return;
  }
  s.stuck_at.reset();
  log_line(options_, detail::LogLevel::warn,
           "link " + description_ + ": a read waited a heartbeat with " +
               std::to_string(s.in.readable()) +
               " bytes of the peer's in the ring (a missed wake-up); reading them");
  serve_read();
}

bool StreamLink::connected() const {
  std::lock_guard lock(mu_);
  return connected_;
}

void StreamLink::broken(std::uint64_t epoch, const asio::error_code& ec) {
  if (epoch != epoch_ || closed()) return;
  const std::string reason =
      ec == asio::error::timed_out
          ? "no frame from the peer for " + std::to_string(options_.dead_after.count()) + " ms"
          : eof_reason(ec);
  // A unix socket has no network in between: whatever breaks it is the peer's process closing
  // it or dying, and nothing will come back. Over TCP a reset can read as an end of stream
  // (whichever operation takes the error first), and a peer that closes on purpose says bye
  // first, so every other break is repaired.
  // A unix peer silent past dead_after is alive but stuck (stopped, or starved of CPU): said
  // here at warn level, since the peer may say nothing of its side of it.
  if (unix_ && ec == asio::error::timed_out) return fail(reason);
  if (unix_ || ec == asio::error::operation_aborted || session_ == 0) return shutdown(reason);
  // A connection that broke before the peer answered on it (a peer that accepts and hangs up)
  // repaired nothing: the redials back off, and the repair's deadline stays.
  const bool answered = answered_ || !redial_ || !repairing_;
  repairing_ = true;
  {
    std::lock_guard lock(mu_);
    ++epoch_;
    connected_ = false;
    writing_ = false;
    in_flight_ = false;
    asio::error_code ignored;
    socket_.close(ignored);
  }
  if (detail::log_enabled(detail::LogLevel::debug)) {
    log_line(options_, detail::LogLevel::debug,
             "link " + description_ + " broken (" + reason + "); repairing");
  }
  if (answered) {
    repair_deadline_ = Clock::now() + options_.reconnect_for;
    repair_reason_ = reason;
  }
  if (!redial_) return wait_for_peer(epoch_);
  if (!answered) return retry_or_give_up(epoch_, reason);
  backoff_ = std::chrono::milliseconds(5);
  redial(epoch_);
}

void StreamLink::redial(std::uint64_t epoch) {
  resolve(*redial_,
          [self = shared(), epoch](const std::string& error, const Protocol::endpoint& ep) {
            if (epoch != self->epoch_ || self->closed()) return;
            if (!error.empty()) return self->retry_or_give_up(epoch, error);
            self->reconnect(ep, epoch);
          });
}

void StreamLink::reconnect(const Protocol::endpoint& ep, std::uint64_t epoch) {
  auto socket = std::make_shared<Protocol::socket>(ctx_);
  asio::error_code opened;
  socket->open(ep.protocol(), opened);
  if (!opened) internal::prepare_socket(socket->native_handle());
  // A host that went silent drops the connection's SYNs, and the kernel would keep retrying for
  // minutes: the attempt ends with the repair's deadline.
  auto give_up = std::make_shared<asio::steady_timer>(strand_, repair_deadline_);
  give_up->async_wait(asio::bind_executor(strand_, [socket](asio::error_code ec) {
    if (ec) return;  // connected (or failed) first
    asio::error_code ignored;
    socket->close(ignored);
  }));
  socket->async_connect(
      ep,
      asio::bind_executor(strand_, [self = shared(), socket, epoch, give_up](asio::error_code ec) {
        give_up->cancel();
        if (epoch != self->epoch_ || self->closed()) return;
        if (ec == asio::error::connection_refused || ec == std::errc::no_such_file_or_directory) {
          // Nobody listens there any more: the peer's process is gone, not just the path.
          return self->shutdown("connection lost (" + self->repair_reason_ +
                                ") and the peer refuses new ones: " + ec.message());
        }
        if (ec) return self->retry_or_give_up(epoch, ec.message());
        if (self->options_.secret.empty()) return self->resecure(std::move(*socket), epoch);
        auth::authenticate(*socket, self->strand_, self->options_.secret, true,
                           self->options_.dead_after,
                           [self, socket, epoch](const std::string& error) {
                             if (epoch != self->epoch_ || self->closed()) return;
                             if (!error.empty()) return self->retry_or_give_up(epoch, error);
                             self->resecure(std::move(*socket), epoch);
                           });
      }));
}

/// Finds where `to` is without blocking the I/O thread (a unix path needs no look-up, and a host
/// name is looked up by asio's resolver off this thread); `then(error, endpoint)` runs on the
/// strand, with `error` empty on success.
void StreamLink::resolve(
    const Address& to,
    std::function<void(const std::string& error, const Protocol::endpoint& ep)> then) {
  if (to.transport != Address::Transport::tcp) {
    Protocol::endpoint ep;
    try {
      ep = to_endpoint(ctx_, to);
    } catch (const std::exception& e) {
      return then(e.what(), ep);
    }
    return then({}, ep);
  }
  auto resolver = std::make_shared<asio::ip::tcp::resolver>(ctx_);
  resolver->async_resolve(
      to.host, std::to_string(to.port),
      asio::bind_executor(
          strand_, [resolver, host = to.host, then = std::move(then)](
                       asio::error_code ec, const asio::ip::tcp::resolver::results_type& results) {
            if (!ec && results.empty()) ec = asio::error::host_not_found;
            if (ec)
              return then("cannot resolve " + host + ": " + ec.message(), Protocol::endpoint());
            then({}, Protocol::endpoint(results.begin()->endpoint()));
          }));
}

/// A redialled connection, authenticated: TLS over it if this link uses TLS, then resume.
void StreamLink::resecure(Protocol::socket socket, std::uint64_t epoch) {
  if (!tls_ctx_) return resume(std::move(socket), nullptr, 0);
  auto s = std::make_shared<Protocol::socket>(std::move(socket));
  auto tls = std::make_shared<std::unique_ptr<TlsSession>>(
      std::make_unique<TlsSession>(tls_ctx_.get(), s->native_handle(), true));
  tls_handshake(*s, **tls, epoch, [self = shared(), s, tls, epoch](const std::string& error) {
    if (!error.empty()) return self->retry_or_give_up(epoch, error);
    self->resume(std::move(*s), std::move(*tls), 0);
  });
}

void StreamLink::retry_or_give_up(std::uint64_t epoch, const std::string& why) {
  if (Clock::now() + backoff_ > repair_deadline_) {
    return shutdown("connection lost (" + repair_reason_ + ") and not restored within " +
                    std::to_string(options_.reconnect_for.count()) + " ms: " + why);
  }
  repair_timer_ = std::make_unique<asio::steady_timer>(strand_, backoff_);
  backoff_ = std::min(backoff_ * 2, std::chrono::milliseconds(500));
  repair_timer_->async_wait([self = shared(), epoch](asio::error_code ec) {
    if (!ec && epoch == self->epoch_ && !self->closed()) self->redial(epoch);
  });
}

void StreamLink::wait_for_peer(std::uint64_t epoch) {
  repair_timer_ = std::make_unique<asio::steady_timer>(strand_, options_.reconnect_for);
  repair_timer_->async_wait([self = shared(), epoch](asio::error_code ec) {
    if (ec || epoch != self->epoch_ || self->closed()) return;
    self->shutdown("connection lost (" + self->repair_reason_ + ") and the peer did not " +
                   "come back within " + std::to_string(self->options_.reconnect_for.count()) +
                   " ms");
  });
}

/// Takes over a new connection for this link (on its strand): everything not yet
/// acknowledged is sent again from the start; the peer drops what it already has.
void StreamLink::resume(Protocol::socket socket, std::unique_ptr<TlsSession> tls,
                        std::uint64_t peer_expects) {
  if (closed()) return;
  {
    std::lock_guard lock(mu_);
    asio::error_code ignored;
    socket_.close(ignored);  // an old connection still thought alive is replaced
    socket_ = std::move(socket);
    tls_ = std::move(tls);
    ++epoch_;
    ++connections_;
    connected_ = true;
    answered_ = false;
    written_ = 0;
    front_sent_ = 0;
    tls_reset_locked();  // a new connection has keys of its own
    ctl_.clear();
    writing_ = false;
    in_flight_ = false;
    if (session_ != 0 && redial_) ctl_.push_back(control_frame(kHello, session_, next_recv_seq_));
  }
  trim(peer_expects);
  last_recv_ = coarse_now();
  read_prefix(epoch_);
  std::lock_guard lock(mu_);
  start_writer_locked();
}

std::string StreamLink::eof_reason(const asio::error_code& ec) {
  if (ec == asio::error::eof || ec == asio::error::broken_pipe ||
      ec == asio::error::connection_reset) {
    return "peer closed the link";
  }
  if (ec == asio::error::operation_aborted) return "link closed";
  return "connection failed: " + ec.message();
}

}  // namespace baton::net::internal
