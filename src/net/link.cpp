#include "baton/net/link.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <future>
#include <random>

#include "net/auth.hpp"
#include "net/counters.hpp"
#include "net/link_impl.hpp"

namespace baton::net {

using internal::StreamLink;

namespace internal {

void prepare_socket(int fd) {
  ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
  int domain = 0;
  socklen_t len = sizeof domain;
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
      (domain == AF_INET || domain == AF_INET6)) {
    const int on = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  }
}

Protocol::endpoint to_endpoint(asio::io_context& ctx, const Address& a) {
  switch (a.transport) {
    case Address::Transport::unix_socket: {
      std::string path = a.host;
      if (!path.empty() && path[0] == '@') path[0] = '\0';  // the abstract namespace
      return Protocol::endpoint(asio::local::stream_protocol::endpoint(path));
    }
    case Address::Transport::tcp: {
      asio::ip::tcp::resolver resolver(ctx);
      auto results = resolver.resolve(a.host, std::to_string(a.port));
      return Protocol::endpoint(results.begin()->endpoint());
    }
    case Address::Transport::inproc:
      break;
  }
  throw std::invalid_argument("address " + a.to_string() +
                              " is in-process; links need unix:// or tcp://");
}

Frame control_frame(std::string_view kind, std::uint64_t a, std::uint64_t b,
                    std::string_view reason) {
  Envelope env;
  env.sender = ActorId{ProcId{"link"}, "link", 0};
  env.dest = PortId{env.sender, 0};
  env.headers.emplace_back(std::string(kControl), std::string(kind));
  if (!reason.empty()) env.headers.emplace_back(std::string(kReason), std::string(reason));
  env.body = encode(a, b);
  return encode_frame(env);
}

std::uint64_t new_session_id() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lock(mu);
  std::uint64_t id = 0;
  while (id == 0) id = rng();
  return id;
}

void log_line(const LinkOptions& options, detail::LogLevel level, const std::string& line) {
  if (!detail::log_enabled(level)) return;
  if (options.log) return options.log(line);
  detail::log_write(level, line);
}

StreamLink::StreamLink(asio::io_context& ctx, Protocol::socket socket, std::string description,
                       const LinkOptions& options, std::shared_ptr<SSL_CTX> tls_ctx)
    : ctx_(ctx),
      strand_(asio::make_strand(ctx)),
      timer_(strand_),
      socket_(std::move(socket)),
      description_(std::move(description)),
      options_(options) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  unix_ = ::getsockname(socket_.native_handle(), reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
          addr.ss_family == AF_UNIX;
  if (!unix_) tls_ctx_ = std::move(tls_ctx);  // a unix link never leaves the host
  if (tls_ctx_) connected_ = false;           // nothing is written before TLS is up
}

/// The dialling side: it owns the session and reconnects to `to` when a connection breaks.
void StreamLink::set_dialler(Address to) {
  redial_ = std::move(to);
  session_ = new_session_id();
  // The hello goes first on the connection, before anything a sender writes directly.
  std::lock_guard lock(mu_);
  ctl_.push_back(control_frame(kHello, session_, 0));
  writing_ = true;
  // With a secret, nothing is written until the handshake has proved the peer.
  if (!options_.secret.empty()) connected_ = false;
}

void StreamLink::start(LinkHandler handler) {
  handler_ = std::move(handler);
  asio::post(strand_, [self = shared()] {
    self->last_recv_ = coarse_now();
    self->arm_heartbeat();
    const std::uint64_t epoch = self->epoch_;
    if (self->connect_on_strand_) return self->connect_first(epoch);
    self->open(epoch);
  });
}

/// On the strand, once the first connection is there: the secret's handshake (dialler), TLS,
/// then frames.
void StreamLink::open(std::uint64_t epoch) {
  if (redial_ && !options_.secret.empty()) {
    auth::authenticate(
        socket_, strand_, options_.secret, true, options_.dead_after,
        [self = shared(), epoch](const std::string& error) {
          if (epoch != self->epoch_ || self->closed()) return;
          if (!error.empty()) {
            return self->shutdown("cannot link to " + self->redial_->to_string() + ": " + error);
          }
          self->secure(epoch);
        });
    return;
  }
  if (tls_ctx_) return secure(epoch);
  if (redial_) {
    if (offer_shm() && closed()) return;
    write_next(epoch);  // the hello set_dialler queued (or what follows the offer)
  }
  read_prefix(epoch);
}

void StreamLink::connect_on_strand() {
  connect_on_strand_ = true;
  unix_ = redial_->transport == Address::Transport::unix_socket;
  std::lock_guard lock(mu_);
  connected_ = false;  // what is sent meanwhile waits for the connection
}

/// On the strand: resolves and connects the first connection without blocking, bounded by
/// dead_after; a failure closes the link with the reason Link::connect would have thrown.
void StreamLink::connect_first(std::uint64_t epoch) {
  const std::string to = redial_->to_string();
  auto cannot = [to](const std::string& why) {
    return "cannot connect to " + to + ": " + why + " (is the peer running and listening there?)";
  };
  resolve(*redial_, [self = shared(), epoch, cannot](const std::string& error,
                                                     const Protocol::endpoint& ep) {
    if (epoch != self->epoch_ || self->closed()) return;
    if (!error.empty()) return self->shutdown(cannot(error));
    auto timed_out = std::make_shared<bool>(false);
    self->repair_timer_ =
        std::make_unique<asio::steady_timer>(self->strand_, self->options_.dead_after);
    self->repair_timer_->async_wait([self, epoch, timed_out](asio::error_code ec) {
      if (ec || epoch != self->epoch_) return;
      *timed_out = true;
      asio::error_code ignored;
      self->socket_.close(ignored);
    });
    asio::error_code opened;
    self->socket_.open(ep.protocol(), opened);
    if (!opened) prepare_socket(self->socket_.native_handle());
    self->socket_.async_connect(
        ep,
        asio::bind_executor(self->strand_, [self, epoch, cannot, timed_out](asio::error_code ec) {
          if (epoch != self->epoch_ || self->closed()) return;
          self->repair_timer_->cancel();
          if (*timed_out) {
            return self->shutdown(cannot(
                "no answer within " + std::to_string(self->options_.dead_after.count()) + " ms"));
          }
          if (ec) return self->shutdown(cannot(ec.message()));
          if (self->options_.secret.empty() && !self->tls_ctx_) {
            std::lock_guard lock(self->mu_);
            self->connected_ = true;  // no handshake to wait for
          }
          self->open(epoch);
        }));
  });
}

bool StreamLink::send(Envelope env) {
  slabs_for(env);
  // Encoded before the lock (the I/O thread's writer takes it too), numbered under it.
  Frame frame = encode_frame(env, options_.limits);  // may throw: nothing is queued
  std::unique_lock lock(mu_);
  if (closed_) return false;
  if (out_bytes_ > options_.max_queued_bytes && !t_io_thread) {
    // Backpressure: wait for the peer to take what is queued (which a peer whose wake-up this
    // thread holds back does not do).
    ring_held_wake_ups();
    if (!room_.wait_for(lock, options_.send_timeout,
                        [&] { return closed_ || out_bytes_ <= options_.max_queued_bytes / 2; })) {
      throw LinkFullError("link " + description_ + " has held " + std::to_string(out_bytes_) +
                          " bytes for " + std::to_string(options_.send_timeout.count()) +
                          " ms: the receiver is not keeping up (raise "
                          "LinkOptions::max_queued_bytes or send_timeout, or slow down)");
    }
    if (closed_) return false;
  }
  set_frame_seq(frame, next_send_seq_++);
  out_bytes_ += frame.size();
  sent_messages_.fetch_add(1, std::memory_order_relaxed);
  sent_bytes_.fetch_add(frame.size(), std::memory_order_relaxed);
  out_.push_back(std::move(frame));
  if (!connected_) return true;  // goes out when the connection is repaired
  if (!writing_ && ctl_.empty() && written_ + 1 == out_.size() && !front_started_locked()) {
    // Nothing queued: write from this thread at once, sparing a wake-up of the I/O thread;
    // whatever the socket does not take now goes the asynchronous way.
    const std::size_t n = write_now(out_.back());
    if (n == out_.back().size()) {
      ++written_;
      drop_written_locked();
      return true;
    }
    front_sent_ = n;
  }
  start_writer_locked();
  return true;
}

void StreamLink::close(const std::string& reason) {
  asio::post(strand_, [self = shared(), reason] {
    if (self->in_flight_) {
      self->close_after_write_ = reason;  // the bye must not cut a frame in half
      return;
    }
    self->shutdown(reason, LinkEnd::closed, true);
  });
}

void StreamLink::close_and_wait(const std::string& reason) {
  auto done = std::make_shared<std::promise<void>>();
  auto f = done->get_future();
  asio::post(strand_, [self = shared(), reason, done] {
    self->shutdown(reason, LinkEnd::closed, true);
    done->set_value();
  });
  f.wait();
}

bool StreamLink::closed() const {
  return closed_.load(std::memory_order_acquire);  // the strand asks once or twice a frame
}

std::string StreamLink::transport() const {
  std::lock_guard lock(mu_);
  if (shm_ && shm_->writing && shm_->reading) return "shm";
  if (tls_ctx_) return "tls";
  return unix_ ? "unix" : "tcp";
}

std::uint64_t StreamLink::connections() const {
  std::lock_guard lock(mu_);
  return connections_;
}

/// On the strand, after the secret's handshake (if any): TLS over the first connection, if
/// this link uses it, then frames.
void StreamLink::secure(std::uint64_t epoch) {
  if (!tls_ctx_) return authenticated(epoch);
  tls_ = std::make_unique<TlsSession>(tls_ctx_.get(), socket_.native_handle(), redial_.has_value());
  tls_handshake(socket_, *tls_, epoch, [self = shared(), epoch](const std::string& error) {
    if (!error.empty()) return self->shutdown(error);
    self->authenticated(epoch);
  });
}

/// Runs a TLS handshake over `socket` (bounded by dead_after) on the strand; `done` gets "" or
/// why not.
void StreamLink::tls_handshake(Protocol::socket& socket, TlsSession& session, std::uint64_t epoch,
                               std::function<void(const std::string&)> done) {
  auto timer = std::make_shared<asio::steady_timer>(strand_, options_.dead_after);
  auto finished = std::make_shared<bool>(false);
  timer->async_wait([self = shared(), finished, &socket](asio::error_code ec) {
    if (ec || *finished) return;
    asio::error_code ignored;
    socket.cancel(ignored);
  });
  auto step = std::make_shared<std::function<void(asio::error_code)>>();
  *step = [self = shared(), timer, finished, epoch, done = std::move(done), &socket, &session,
           weak = std::weak_ptr(step)](asio::error_code ec) {
    if (epoch != self->epoch_ || self->closed()) return;
    std::string error;
    TlsSession::Want want = TlsSession::Want::nothing;
    if (ec) {
      error = ec == asio::error::operation_aborted
                  ? "no answer within " + std::to_string(self->options_.dead_after.count()) + " ms"
                  : ec.message();
    } else {
      want = session.handshake(error);
    }
    if (want != TlsSession::Want::nothing) {
      const auto wait = want == TlsSession::Want::read ? Protocol::socket::wait_read
                                                       : Protocol::socket::wait_write;
      auto again = weak.lock();
      return socket.async_wait(
          wait, asio::bind_executor(self->strand_, [again](asio::error_code e) { (*again)(e); }));
    }
    *finished = true;
    timer->cancel();
    if (!error.empty()) {
      return done("TLS handshake with " + self->description_ + " failed: " + error +
                  " (does the peer's certificate chain to our CA, and ours to its?)");
    }
    done({});
  };
  (*step)({});
}

/// The first connection proved the peer (on the strand): frames may flow.
void StreamLink::authenticated(std::uint64_t epoch) {
  bool direct = false;
  {
    std::lock_guard lock(mu_);
    connected_ = true;
    direct = writing_;  // the dialler's hello is queued and the writer marked as ours
    if (!direct) start_writer_locked();
  }
  last_recv_ = coarse_now();
  if (direct) {
    if (offer_shm() && closed()) return;
    write_next(epoch);  // the hello set_dialler queued, then what was sent since
  }
  read_prefix(epoch);
}

namespace {

/// The end of a TCP connection whose link closed on purpose: the rest of its bye goes out, then
/// its end of stream, and whatever the peer still sends is read and dropped until the peer
/// closes its end too, or `limit` passes. Closing at once with bytes unread (the peer's acks,
/// say) would reset the connection, and a reset can drop the bye still on its way: the peer
/// would take the close for a broken connection and wait reconnect_for for it to come back.
class Lingering : public std::enable_shared_from_this<Lingering> {
 public:
  Lingering(asio::io_context& ctx, Protocol::socket socket, std::string rest)
      : strand_(asio::make_strand(ctx)),
        socket_(std::move(socket)),
        rest_(std::move(rest)),
        timer_(strand_) {}

  void start(std::chrono::milliseconds limit) {
    timer_.expires_after(limit);
    timer_.async_wait(asio::bind_executor(strand_, [self = shared_from_this()](auto ec) {
      if (!ec) self->end();
    }));
    asio::async_write(socket_, asio::buffer(rest_),
                      asio::bind_executor(strand_, [self = shared_from_this()](auto ec, auto) {
                        if (ec) return self->end();
                        asio::error_code ignored;
                        self->socket_.shutdown(Protocol::socket::shutdown_send, ignored);
                        self->drain();
                      }));
  }

 private:
  void drain() {
    socket_.async_read_some(
        asio::buffer(sink_),
        asio::bind_executor(strand_, [self = shared_from_this()](auto ec, auto) {
          if (ec) return self->end();
          self->drain();
        }));
  }
  void end() {
    asio::error_code ignored;
    timer_.cancel();
    socket_.close(ignored);
  }

  asio::strand<asio::io_context::executor_type> strand_;
  Protocol::socket socket_;
  std::string rest_;
  asio::steady_timer timer_;
  std::array<char, 4096> sink_{};
};

}  // namespace

/// What of `bye` the socket did not take from write_now(), which took `n` (under mu_).
std::string StreamLink::unwritten_locked(const Frame& bye, std::size_t n) {
  if (!tls_ctx_) return bye.flatten().substr(n);
  std::string rest = n == bye.size() ? std::string() : tls_out_.substr(tls_out_sent_);
  tls_reset_locked();
  return rest;
}

void StreamLink::fail(const std::string& reason) {
  log_line(options_, detail::LogLevel::warn, "link " + description_ + " closed: " + reason);
  shutdown(reason);
}

/// Closes for good; `tell_peer` sends a bye first when the connection is between frames.
void StreamLink::shutdown(const std::string& reason, LinkEnd end, bool tell_peer) {
  std::deque<Frame> unsent;
  std::optional<std::string> bye_rest;  // over TCP: what of the bye is still to go (Lingering)
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    if (tell_peer && connected_ && !in_flight_ && !front_started_locked()) {
      const Frame bye = control_frame(kBye, 0, 0, reason);
      const std::size_t n = write_now(bye);
      if (!unix_) bye_rest = unwritten_locked(bye, n);
    }
    closed_.store(true, std::memory_order_release);
    connected_ = false;
    unsent.swap(out_);
    out_bytes_ = 0;
    ctl_.clear();
    if (shm_) {  // a read's or write's handler holds this link
      shm_->read_op.abort();
      shm_->write_op.abort();
    }
    room_came_locked();  // a closed link has room: nobody waits on it any more
  }
  room_.notify_all();
  if (detail::log_enabled(detail::LogLevel::debug)) {
    log_line(options_, detail::LogLevel::debug, "link " + description_ + " closed: " + reason);
  }
  if (sessions_ && session_ != 0) {
    std::lock_guard lock(sessions_->mu);
    auto it = sessions_->by_id.find(session_);
    if (it != sessions_->by_id.end() && it->second.lock().get() == this) {
      sessions_->by_id.erase(it);
    }
  }
  asio::error_code ignored;
  timer_.cancel();
  if (repair_timer_) repair_timer_->cancel();
  {
    std::lock_guard lock(mu_);
    ++epoch_;
    if (shm_) shm_->close_bells();  // now, not when the last handler that holds the link goes
    if (bye_rest) {
      socket_.cancel(ignored);  // the link's own reads and waits end, as a close ends them
      std::make_shared<Lingering>(ctx_, std::move(socket_), std::move(*bye_rest))
          ->start(options_.dead_after);
    } else {
      socket_.shutdown(Protocol::socket::shutdown_both, ignored);
      socket_.close(ignored);
    }
  }
  if (handler_.on_unsent && !unsent.empty()) {
    std::vector<Envelope> back;
    back.reserve(unsent.size());
    for (const Frame& f : unsent) {
      try {
        back.push_back(decode_frame(Bytes::adopt(f.flatten()), options_.limits));
      } catch (const std::exception&) {
        // Our own encoding: it decodes. Nothing to hand back if it somehow does not.
      }
    }
    handler_.on_unsent(std::move(back));
  }
  if (handler_.on_closed) handler_.on_closed(end, reason);
  handler_ = {};  // drop captured state; the link may outlive its owner's interest
}

}  // namespace internal

LinkCounters counters_of(const Link& link) {
  const auto* l = dynamic_cast<const internal::StreamLink*>(&link);
  if (l == nullptr) return {};
  return {l->sent_messages_.load(std::memory_order_relaxed),
          l->sent_bytes_.load(std::memory_order_relaxed),
          l->received_messages_.load(std::memory_order_relaxed),
          l->received_bytes_.load(std::memory_order_relaxed)};
}

std::shared_ptr<Link> Link::connect(IoThread& io, const Address& to, LinkHandler handler,
                                    const LinkOptions& options) {
  auto& ctx = io.impl().ctx;
  Protocol::socket socket(ctx);
  // An I/O thread (a link's handler dialling a peer) must not wait for a connect or a DNS
  // look-up: the link connects on its strand, and a failure closes it with the reason.
  const bool on_io_thread = internal::t_io_thread;
  try {
    if (on_io_thread) {
      if (to.transport != Address::Transport::tcp) (void)internal::to_endpoint(ctx, to);  // checks
    } else {
      const Protocol::endpoint ep = internal::to_endpoint(ctx, to);
      socket.open(ep.protocol());
      internal::prepare_socket(socket.native_handle());
      // Bounded by dead_after: a host that drops the SYNs would keep a blocking connect (and
      // the thread that called, perhaps a caller's) for minutes.
      // (The system's connect: Asio's synchronous one waits without end for a pending connect.)
      socket.non_blocking(true);
      asio::error_code ec;
      if (::connect(socket.native_handle(), ep.data(), static_cast<socklen_t>(ep.size())) != 0) {
        ec = asio::error_code(errno, asio::system_category());
      }
      if (ec == asio::error::in_progress || ec == asio::error::would_block) {
        pollfd p{socket.native_handle(), POLLOUT, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(options.dead_after.count()));
        if (ready == 0) {
          throw std::runtime_error("cannot connect to " + to.to_string() + ": no answer within " +
                                   std::to_string(options.dead_after.count()) +
                                   " ms (is the host up and reachable from here?)");
        }
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(socket.native_handle(), SOL_SOCKET, SO_ERROR, &err, &len);
        ec = err == 0 ? asio::error_code() : asio::error_code(err, asio::system_category());
      }
      if (ec) throw std::system_error(ec);
      socket.non_blocking(false);
    }
  } catch (const std::system_error& e) {
    throw std::runtime_error("cannot connect to " + to.to_string() + ": " + e.code().message() +
                             " (is the peer running and listening there?)");
  }
  std::shared_ptr<SSL_CTX> tls;
  if (options.tls.enabled() && to.transport == Address::Transport::tcp) {
    tls = internal::make_tls_context(options.tls);
  }
  auto link =
      std::make_shared<StreamLink>(ctx, std::move(socket), "-> " + to.to_string(), options, tls);
  link->set_dialler(to);
  if (on_io_thread) link->connect_on_strand();
  link->start(std::move(handler));
  return link;
}

}  // namespace baton::net
