#include "baton/net/link.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <climits>

#include <asio.hpp>
#include <asio/ssl.hpp>

#include "net/auth.hpp"

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <tuple>
#include <unordered_map>

namespace baton::net {

using Protocol = asio::generic::stream_protocol;
using TlsStream = asio::ssl::stream<Protocol::socket>;

struct IoThread::Impl {
  asio::io_context ctx;
  asio::executor_work_guard<asio::io_context::executor_type> guard{ctx.get_executor()};
  std::thread thread;
};

namespace {
thread_local bool t_io_thread = false;  // this thread runs an IoThread's event loop
}  // namespace

IoThread::IoThread() : impl_(std::make_unique<Impl>()) {
  impl_->thread = std::thread([this] {
    t_io_thread = true;
    impl_->ctx.run();
  });
}

IoThread::~IoThread() {
  impl_->guard.reset();
  impl_->ctx.stop();
  impl_->thread.join();
}

namespace {

/// No process this one starts inherits a link's socket (Asio opens them without SOCK_CLOEXEC).
void close_on_exec(int fd) {
  ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
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

// Link control frames carry this header; they have no sequence number of their own.
constexpr std::string_view kControl = "baton.link";
constexpr std::string_view kHello = "hello";  // body: session, next seq expected from the peer
constexpr std::string_view kAck = "ack";      // body: next seq expected from the peer
constexpr std::string_view kBye = "bye";      // the peer closes the link on purpose

Frame control_frame(std::string_view kind, std::uint64_t a, std::uint64_t b = 0) {
  Envelope env;
  env.sender = ActorId{ProcId{"link"}, "link", 0};
  env.dest = PortId{env.sender, 0};
  env.headers.emplace_back(std::string(kControl), std::string(kind));
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

/// The TLS context of links with `tls`: mutual, TLS 1.2 or later, peers checked against the CA.
std::shared_ptr<asio::ssl::context> make_tls_context(const TlsOptions& tls) {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls);
  try {
    ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                     asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                     asio::ssl::context::no_tlsv1_1);
    ctx->use_certificate_chain_file(tls.cert_file);
    ctx->use_private_key_file(tls.key_file, asio::ssl::context::pem);
    ctx->load_verify_file(tls.ca_file);
    ctx->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  } catch (const std::system_error& e) {
    throw std::runtime_error("cannot set up TLS with certificate " + tls.cert_file + ", key " +
                             tls.key_file + " and CA " + tls.ca_file + ": " + e.what() +
                             " (check the files exist and are PEM)");
  }
  return ctx;
}

class StreamLink;

/// The links a listener accepted, by session, so a reconnecting dialler finds its link again.
struct Sessions {
  std::mutex mu;
  std::unordered_map<std::uint64_t, std::weak_ptr<StreamLink>> by_id;
};

class StreamLink final : public Link {
 public:
  using Clock = std::chrono::steady_clock;

  StreamLink(asio::io_context& ctx, Protocol::socket socket, std::string description,
             const LinkOptions& options, std::shared_ptr<asio::ssl::context> tls_ctx = nullptr)
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
  void set_dialler(Address to) {
    redial_ = std::move(to);
    session_ = new_session_id();
    // The hello goes first on the connection, before anything a sender writes directly.
    std::lock_guard lock(mu_);
    ctl_.push_back(control_frame(kHello, session_, 0));
    writing_ = true;
    // With a secret, nothing is written until the handshake has proved the peer.
    if (!options_.secret.empty()) connected_ = false;
  }
  /// The accepting side: a hello on a new connection may hand it to an existing link.
  void set_sessions(std::shared_ptr<Sessions> sessions) { sessions_ = std::move(sessions); }

  void start(LinkHandler handler) {
    handler_ = std::move(handler);
    asio::post(strand_, [self = shared()] {
      self->last_recv_ = Clock::now();
      self->arm_heartbeat();
      const std::uint64_t epoch = self->epoch_;
      if (self->redial_ && !self->options_.secret.empty()) {
        auth::authenticate(self->socket_, self->strand_, self->options_.secret, true,
                           self->options_.dead_after, [self, epoch](const std::string& error) {
                             if (epoch != self->epoch_ || self->closed()) return;
                             if (!error.empty()) {
                               return self->shutdown("cannot link to " +
                                                     self->redial_->to_string() + ": " + error);
                             }
                             self->secure(epoch);
                           });
        return;
      }
      if (self->tls_ctx_) return self->secure(epoch);
      if (self->redial_) self->write_next(epoch);  // the hello set_dialler queued
      self->read_prefix(epoch);
    });
  }

  bool send(Envelope env) override {
    std::unique_lock lock(mu_);
    if (closed_) return false;
    if (out_bytes_ > options_.max_queued_bytes && !t_io_thread) {
      // Backpressure: wait for the peer to take what is queued.
      if (!room_.wait_for(lock, options_.send_timeout,
                          [&] { return closed_ || out_bytes_ <= options_.max_queued_bytes / 2; })) {
        throw LinkFullError("link " + description_ + " has held " + std::to_string(out_bytes_) +
                            " bytes for " + std::to_string(options_.send_timeout.count()) +
                            " ms: the receiver is not keeping up (raise "
                            "LinkOptions::max_queued_bytes or send_timeout, or slow down)");
      }
      if (closed_) return false;
    }
    env.seq = next_send_seq_;
    Frame frame = encode_frame(env, options_.limits);  // may throw: then the seq is not used
    ++next_send_seq_;
    out_bytes_ += frame.size();
    out_.push_back(std::move(frame));
    if (!connected_) return true;  // goes out when the connection is repaired
    if (!writing_ && ctl_.empty() && written_ + 1 == out_.size() && front_sent_ == 0) {
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

  void close(const std::string& reason) override {
    asio::post(strand_, [self = shared(), reason] {
      if (self->in_flight_) {
        self->close_after_write_ = reason;  // the bye must not cut a frame in half
        return;
      }
      self->shutdown(reason, true);
    });
  }

  void close_and_wait(const std::string& reason) override {
    auto done = std::make_shared<std::promise<void>>();
    auto f = done->get_future();
    asio::post(strand_, [self = shared(), reason, done] {
      self->shutdown(reason, true);
      done->set_value();
    });
    f.wait();
  }

  bool closed() const override {
    std::lock_guard lock(mu_);
    return closed_;
  }

  std::string describe() const override { return description_; }

  std::uint64_t connections() const override {
    std::lock_guard lock(mu_);
    return connections_;
  }

  /// On the strand, after the secret's handshake (if any): TLS over the first connection, if
  /// this link uses it, then frames.
  void secure(std::uint64_t epoch) {
    if (!tls_ctx_) return authenticated(epoch);
    tls_ = std::make_unique<TlsStream>(std::move(socket_), *tls_ctx_);
    tls_handshake(*tls_, redial_.has_value(), epoch,
                  [self = shared(), epoch](const std::string& error) {
                    if (!error.empty()) return self->shutdown(error);
                    self->authenticated(epoch);
                  });
  }

  /// Runs a TLS handshake (bounded by dead_after) on the strand; `done` gets "" or why not.
  void tls_handshake(TlsStream& stream, bool client, std::uint64_t epoch,
                     std::function<void(const std::string&)> done) {
    auto timer = std::make_shared<asio::steady_timer>(strand_, options_.dead_after);
    auto finished = std::make_shared<bool>(false);
    timer->async_wait([self = shared(), finished, &stream](asio::error_code ec) {
      if (ec || *finished) return;
      asio::error_code ignored;
      stream.next_layer().cancel(ignored);
    });
    stream.async_handshake(
        client ? asio::ssl::stream_base::client : asio::ssl::stream_base::server,
        asio::bind_executor(strand_, [self = shared(), timer, finished, epoch,
                                      done = std::move(done)](asio::error_code ec) {
          *finished = true;
          timer->cancel();
          if (epoch != self->epoch_ || self->closed()) return;
          if (ec) {
            return done("TLS handshake with " + self->description_ + " failed: " + ec.message() +
                        " (does the peer's certificate chain to our CA, and ours to its?)");
          }
          done({});
        }));
  }

  /// The first connection proved the peer (on the strand): frames may flow.
  void authenticated(std::uint64_t epoch) {
    bool direct = false;
    {
      std::lock_guard lock(mu_);
      connected_ = true;
      direct = writing_;  // the dialler's hello is queued and the writer marked as ours
      if (!direct) start_writer_locked();
    }
    last_recv_ = Clock::now();
    if (direct) write_next(epoch);  // the hello set_dialler queued, then what was sent since
    read_prefix(epoch);
  }

  /// Takes over a new connection for this link (on its strand): everything not yet
  /// acknowledged is sent again from the start; the peer drops what it already has.
  void resume(Protocol::socket socket, std::unique_ptr<TlsStream> tls, std::uint64_t peer_expects) {
    if (closed()) return;
    {
      std::lock_guard lock(mu_);
      asio::error_code ignored;
      lowest().close(ignored);  // an old connection still thought alive is replaced
      if (tls) {
        tls_ = std::move(tls);
      } else {
        tls_.reset();
        socket_ = std::move(socket);
      }
      ++epoch_;
      ++connections_;
      connected_ = true;
      written_ = 0;
      front_sent_ = 0;
      ctl_.clear();
      writing_ = false;
      in_flight_ = false;
      if (session_ != 0 && redial_) ctl_.push_back(control_frame(kHello, session_, next_recv_seq_));
    }
    trim(peer_expects);
    last_recv_ = Clock::now();
    read_prefix(epoch_);
    std::lock_guard lock(mu_);
    start_writer_locked();
  }

 private:
  std::shared_ptr<StreamLink> shared() {
    return std::static_pointer_cast<StreamLink>(shared_from_this());
  }

  // --- reading: prefix, header, then each part into its own buffer -------------------------

  /// Reads exactly `buffer`, then runs `next` on the strand; a failed read breaks the
  /// connection of epoch `epoch` (a handler of an older connection is ignored).
  void read_then(asio::mutable_buffer buffer, std::uint64_t epoch,
                 void (StreamLink::*next)(std::uint64_t)) {
    async_read_all(buffer, asio::bind_executor(strand_, [self = shared(), next, epoch](
                                                            asio::error_code ec, std::size_t) {
                     if (epoch != self->epoch_) return;
                     if (ec) return self->broken(epoch, ec);
                     ((*self).*next)(epoch);
                   }));
  }

  void read_prefix(std::uint64_t epoch) {
    read_then(asio::buffer(prefix_), epoch, &StreamLink::on_prefix);
  }

  void on_prefix(std::uint64_t epoch) {
    std::size_t len = 0;
    try {
      len = decode_header_length(prefix_, options_.limits);
    } catch (const DecodeError& e) {
      return shutdown(e.what());
    }
    header_.assign(len, '\0');
    read_then(asio::buffer(header_), epoch, &StreamLink::on_header);
  }

  void on_header(std::uint64_t epoch) {
    incoming_ = Envelope{};
    try {
      part_lengths_ = decode_header(Bytes::adopt(std::move(header_)), incoming_, options_.limits);
    } catch (const DecodeError& e) {
      return shutdown(e.what());
    }
    incoming_.body.parts.reserve(part_lengths_.size());
    read_part(epoch, 0);
  }

  void read_part(std::uint64_t epoch, std::size_t i) {
    if (i == part_lengths_.size()) return deliver(epoch);
    auto buf = std::make_shared<std::vector<std::byte>>(static_cast<std::size_t>(part_lengths_[i]));
    async_read_all(asio::buffer(*buf),
                   asio::bind_executor(
                       strand_, [self = shared(), buf, i, epoch](asio::error_code ec, std::size_t) {
                         if (epoch != self->epoch_) return;
                         if (ec) return self->broken(epoch, ec);
                         self->incoming_.body.parts.push_back(Bytes::adopt(std::move(*buf)));
                         self->read_part(epoch, i + 1);
                       }));
  }

  void deliver(std::uint64_t epoch) {
    last_recv_ = Clock::now();
    if (const std::string* kind = incoming_.header(kControl)) return on_control(epoch, *kind);
    ++frames_in_;
    const std::uint64_t seq = incoming_.seq;
    if (seq < next_recv_seq_) {
      read_prefix(epoch);  // a duplicate of a frame already delivered (resent after a repair)
      return;
    }
    if (seq > next_recv_seq_) {
      return shutdown("frame sequence gap: expected " + std::to_string(next_recv_seq_) + ", got " +
                      std::to_string(seq));
    }
    ++next_recv_seq_;
    if (!unix_ && ++unacked_in_ >= options_.ack_every) send_ack();
    if (handler_.on_envelope) {
      try {
        handler_.on_envelope(std::move(incoming_));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "baton: link %s: envelope handler threw: %s\n", description_.c_str(),
                     e.what());
      }
    }
    if (epoch != epoch_) return;
    if (pause_requested_.load(std::memory_order_acquire)) {
      parked_ = epoch;  // resume_reading() picks up from here
      return;
    }
    read_prefix(epoch);
  }

 public:
  void pause_reading() override { pause_requested_.store(true, std::memory_order_release); }

  void resume_reading() override {
    asio::post(strand_, [self = shared()] {
      self->pause_requested_.store(false, std::memory_order_release);
      if (!self->parked_) return;
      const std::uint64_t epoch = *self->parked_;
      self->parked_.reset();
      self->last_recv_ = Clock::now();  // the silence was ours, not the peer's
      if (epoch == self->epoch_ && !self->closed()) self->read_prefix(epoch);
    });
  }

  std::size_t queued_bytes() const override {
    std::lock_guard lock(mu_);
    return out_bytes_;
  }

 private:
  void on_control(std::uint64_t epoch, const std::string& kind) {
    std::uint64_t a = 0;
    std::uint64_t b = 0;
    try {
      std::tie(a, b) = decode<std::tuple<std::uint64_t, std::uint64_t>>(incoming_.body);
    } catch (const DecodeError& e) {
      return shutdown(std::string("malformed link control frame: ") + e.what());
    }
    if (kind == kAck) {
      trim(a);
    } else if (kind == kBye) {
      return shutdown("peer closed the link");
    } else if (kind == kHello) {
      if (a == 0) return shutdown("a hello with no session");
      if (redial_) {
        trim(b);  // the listener's answer on a repaired connection
      } else if (!adopt_session(a, b)) {
        return;  // the connection went to the link it belongs to
      }
    } else {
      return shutdown("unknown link control frame '" + detail::printable(kind) + "'");
    }
    read_prefix(epoch);
  }

  /// On the accepting side: the first hello of a connection names its session. A new session
  /// is this link's; a known one takes the connection over, and this link ends quietly.
  bool adopt_session(std::uint64_t session, std::uint64_t peer_expects) {
    if (session_ == session) {
      trim(peer_expects);
      return true;
    }
    if (session_ != 0 || frames_in_ != 0 || !sessions_) {
      shutdown("a hello in the middle of a link");
      return false;
    }
    std::shared_ptr<StreamLink> owner;
    {
      std::lock_guard lock(sessions_->mu);
      auto& slot = sessions_->by_id[session];
      owner = slot.lock();
      if (!owner || owner->closed()) {
        slot = shared();
        owner = nullptr;
      }
    }
    if (!owner) {
      session_ = session;
      trim(peer_expects);
      queue_control(control_frame(kHello, session_, next_recv_seq_));
      return true;
    }
    auto taken =
        std::make_shared<std::pair<Protocol::socket, std::unique_ptr<TlsStream>>>(take_socket());
    shutdown("connection resumed by its session's link");
    asio::post(owner->strand_, [owner, peer_expects, taken]() mutable {
      owner->resume(std::move(taken->first), std::move(taken->second), peer_expects);
      owner->queue_control(control_frame(kHello, owner->session_, owner->next_recv_seq_));
    });
    return false;
  }

  std::pair<Protocol::socket, std::unique_ptr<TlsStream>> take_socket() {
    std::lock_guard lock(mu_);
    ++epoch_;
    return {std::move(socket_), std::move(tls_)};
  }

  /// The transport under TLS, or the plain socket.
  Protocol::socket& lowest() { return tls_ ? tls_->next_layer() : socket_; }

  template <class Buffers, class Handler>
  void async_read_all(const Buffers& buffers, Handler&& handler) {
    if (tls_) {
      asio::async_read(*tls_, buffers, std::forward<Handler>(handler));
    } else {
      asio::async_read(socket_, buffers, std::forward<Handler>(handler));
    }
  }
  template <class Buffers, class Handler>
  void async_write_all(const Buffers& buffers, Handler&& handler) {
    if (tls_) {
      asio::async_write(*tls_, buffers, std::forward<Handler>(handler));
    } else {
      asio::async_write(socket_, buffers, std::forward<Handler>(handler));
    }
  }

  /// Drops the frames the peer acknowledged: those with seq < `next`.
  void trim(std::uint64_t next) {
    std::lock_guard lock(mu_);
    while (!out_.empty() && written_ > 0 && out_base_seq_ < next) {
      pop_front_locked();
      --written_;
    }
  }

  /// A unix socket is never repaired (see broken()), so what is written needs no keeping.
  void drop_written_locked() {
    if (!unix_) return;
    while (written_ > 0) {
      pop_front_locked();
      --written_;
    }
  }

  void pop_front_locked() {
    out_bytes_ -= out_.front().size();
    out_.pop_front();
    ++out_base_seq_;
    if (out_bytes_ <= options_.max_queued_bytes / 2) room_.notify_all();
  }

  void send_ack() {
    unacked_in_ = 0;
    queue_control(control_frame(kAck, next_recv_seq_));
  }

  // --- heartbeats ----------------------------------------------------------------------------

  void arm_heartbeat() {
    timer_.expires_after(options_.heartbeat);
    timer_.async_wait([self = shared()](asio::error_code ec) {
      if (ec || self->closed()) return;
      if (self->connected() && !self->parked_ &&
          Clock::now() - self->last_recv_ > self->options_.dead_after) {
        self->broken(self->epoch_, asio::error::timed_out);
      } else if (self->connected()) {
        self->send_ack();  // the heartbeat, acknowledging what arrived
      }
      self->arm_heartbeat();
    });
  }

  bool connected() const {
    std::lock_guard lock(mu_);
    return connected_;
  }

  // --- a broken connection: repair, or close for good -----------------------------------------

  void broken(std::uint64_t epoch, const asio::error_code& ec) {
    if (epoch != epoch_ || closed()) return;
    const std::string reason =
        ec == asio::error::timed_out
            ? "no frame from the peer for " + std::to_string(options_.dead_after.count()) + " ms"
            : eof_reason(ec);
    // A unix socket has no network in between: whatever breaks it is the peer's process closing
    // it or dying, and nothing will come back. Over TCP a reset can read as an end of stream
    // (whichever operation takes the error first), and a peer that closes on purpose says bye
    // first, so every other break is repaired.
    if (unix_ || ec == asio::error::operation_aborted || session_ == 0) return shutdown(reason);
    {
      std::lock_guard lock(mu_);
      ++epoch_;
      connected_ = false;
      writing_ = false;
      in_flight_ = false;
      asio::error_code ignored;
      lowest().close(ignored);
    }
    if (std::getenv("BATON_DEBUG_LINKS") != nullptr) {
      std::fprintf(stderr, "baton: link %s broken (%s); repairing\n", description_.c_str(),
                   reason.c_str());
    }
    repair_deadline_ = Clock::now() + options_.reconnect_for;
    repair_reason_ = reason;
    if (redial_) {
      backoff_ = std::chrono::milliseconds(5);
      redial(epoch_);
    } else {
      wait_for_peer(epoch_);
    }
  }

  void redial(std::uint64_t epoch) {
    auto socket = std::make_shared<Protocol::socket>(ctx_);
    Protocol::endpoint ep;
    try {
      ep = to_endpoint(ctx_, *redial_);
    } catch (const std::exception& e) {
      return retry_or_give_up(epoch, e.what());
    }
    asio::error_code opened;
    socket->open(ep.protocol(), opened);
    if (!opened) close_on_exec(socket->native_handle());
    socket->async_connect(
        ep, asio::bind_executor(strand_, [self = shared(), socket, epoch](asio::error_code ec) {
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

  /// A redialled connection, authenticated: TLS over it if this link uses TLS, then resume.
  void resecure(Protocol::socket socket, std::uint64_t epoch) {
    if (!tls_ctx_) return resume(std::move(socket), nullptr, 0);
    auto tls = std::make_shared<std::unique_ptr<TlsStream>>(
        std::make_unique<TlsStream>(std::move(socket), *tls_ctx_));
    tls_handshake(**tls, true, epoch, [self = shared(), tls, epoch](const std::string& error) {
      if (!error.empty()) return self->retry_or_give_up(epoch, error);
      self->resume(Protocol::socket(self->ctx_), std::move(*tls), 0);
    });
  }

  void retry_or_give_up(std::uint64_t epoch, const std::string& why) {
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

  void wait_for_peer(std::uint64_t epoch) {
    repair_timer_ = std::make_unique<asio::steady_timer>(strand_, options_.reconnect_for);
    repair_timer_->async_wait([self = shared(), epoch](asio::error_code ec) {
      if (ec || epoch != self->epoch_ || self->closed()) return;
      self->shutdown("connection lost (" + self->repair_reason_ + ") and the peer did not " +
                     "come back within " + std::to_string(self->options_.reconnect_for.count()) +
                     " ms");
    });
  }

  // --- writing: one frame at a time, control frames between data frames ---------------------

  void queue_control(Frame frame) {
    std::lock_guard lock(mu_);
    if (closed_) return;
    ctl_.push_back(std::move(frame));
    if (connected_) start_writer_locked();
  }

  void start_writer_locked() {
    if (writing_ || !connected_) return;
    writing_ = true;
    asio::post(strand_, [self = shared(), epoch = epoch_.load()] { self->write_next(epoch); });
  }

  void write_next(std::uint64_t epoch) {
    Frame* frame = nullptr;
    bool control = false;
    std::size_t skip = 0;
    {
      std::lock_guard lock(mu_);
      if (epoch != epoch_) return;
      if (closed_ || !connected_) {
        writing_ = false;
        return;
      }
      if (front_sent_ == 0 && !ctl_.empty()) {
        frame = &ctl_.front();
        control = true;
      } else if (written_ < out_.size()) {
        frame = &out_[written_];
        skip = front_sent_;  // bytes a direct write already sent
      } else {
        writing_ = false;
        return;
      }
    }
    buffers_.clear();
    auto add = [&](const void* data, std::size_t size) {
      if (skip >= size) {
        skip -= size;
        return;
      }
      buffers_.emplace_back(static_cast<const char*>(data) + skip, size - skip);
      skip = 0;
    };
    add(frame->header.data(), frame->header.size());
    for (const Bytes& p : frame->parts) add(p.data(), p.size());
    in_flight_ = true;
    async_write_all(buffers_, asio::bind_executor(strand_, [self = shared(), control, epoch](
                                                               asio::error_code ec, std::size_t) {
                      if (epoch != self->epoch_) return;
                      self->in_flight_ = false;
                      if (ec) return self->broken(epoch, ec);
                      if (self->close_after_write_)
                        return self->shutdown(*self->close_after_write_, true);
                      {
                        std::lock_guard lock(self->mu_);
                        if (control) {
                          self->ctl_.pop_front();
                        } else {
                          ++self->written_;
                          self->front_sent_ = 0;
                          self->drop_written_locked();
                        }
                      }
                      self->write_next(epoch);
                    }));
  }

  /// One non-blocking gather write of a whole frame; returns the bytes the socket took.
  std::size_t write_now(const Frame& frame) {
    if (tls_ || tls_ctx_) return 0;  // TLS records are written by the asynchronous path
    std::vector<iovec> iov;
    iov.reserve(1 + frame.parts.size());
    iov.push_back({const_cast<char*>(frame.header.data()), frame.header.size()});
    for (const Bytes& p : frame.parts) {
      if (p.size() > 0) iov.push_back({const_cast<std::byte*>(p.data()), p.size()});
    }
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = std::min<std::size_t>(iov.size(), IOV_MAX);
    const ssize_t n = ::sendmsg(socket_.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    return n > 0 ? static_cast<std::size_t>(n) : 0;  // errors surface on the async path
  }

  static std::string eof_reason(const asio::error_code& ec) {
    if (ec == asio::error::eof || ec == asio::error::broken_pipe ||
        ec == asio::error::connection_reset) {
      return "peer closed the link";
    }
    if (ec == asio::error::operation_aborted) return "link closed";
    return "connection failed: " + ec.message();
  }

  /// Closes for good; `tell_peer` sends a bye first when the connection is between frames.
  void shutdown(const std::string& reason, bool tell_peer = false) {
    std::deque<Frame> unsent;
    {
      std::lock_guard lock(mu_);
      if (closed_) return;
      if (tell_peer && connected_ && !in_flight_ && front_sent_ == 0) {
        (void)write_now(control_frame(kBye, 0));
      }
      closed_ = true;
      connected_ = false;
      unsent.swap(out_);
      out_bytes_ = 0;
      ctl_.clear();
    }
    room_.notify_all();
    if (std::getenv("BATON_DEBUG_LINKS") != nullptr) {
      std::fprintf(stderr, "baton: link %s closed: %s\n", description_.c_str(), reason.c_str());
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
      lowest().shutdown(Protocol::socket::shutdown_both, ignored);
      lowest().close(ignored);
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
    if (handler_.on_closed) handler_.on_closed(reason);
    handler_ = {};  // drop captured state; the link may outlive its owner's interest
  }

  asio::io_context& ctx_;
  asio::strand<asio::io_context::executor_type> strand_;
  asio::steady_timer timer_;
  Protocol::socket socket_;                      // the connection, unless TLS holds it
  std::shared_ptr<asio::ssl::context> tls_ctx_;  // set when this link runs TLS
  std::unique_ptr<TlsStream> tls_;               // the connection, under TLS
  std::string description_;
  LinkOptions options_;
  LinkHandler handler_;
  std::optional<Address> redial_;       // set on the dialling side
  std::uint64_t session_ = 0;           // 0: none (a peer that sent no hello)
  std::shared_ptr<Sessions> sessions_;  // set on the accepting side

  // Touched only on the strand (epoch_ is also changed under mu_, and read there).
  std::atomic<std::uint64_t> epoch_{0};  // the connection handlers belong to
  std::byte prefix_[4] = {};
  std::string header_;
  Envelope incoming_;
  std::vector<std::uint64_t> part_lengths_;
  std::uint64_t next_recv_seq_ = 0;
  std::uint64_t frames_in_ = 0;
  std::size_t unacked_in_ = 0;
  Clock::time_point last_recv_ = Clock::now();
  std::atomic<bool> pause_requested_{false};
  std::optional<std::uint64_t> parked_;  // reading stopped after a frame of this epoch (strand)
  Clock::time_point repair_deadline_;
  std::string repair_reason_;
  std::chrono::milliseconds backoff_{5};
  std::unique_ptr<asio::steady_timer> repair_timer_;

  // Writing state, under mu_. out_ holds every data frame not yet acknowledged, from seq
  // out_base_seq_ on; the first written_ of them are on the wire.
  mutable std::mutex mu_;
  std::condition_variable room_;  // send() waits here while the link is full
  std::size_t out_bytes_ = 0;     // bytes in out_
  std::deque<Frame> out_;
  std::deque<Frame> ctl_;
  std::uint64_t out_base_seq_ = 0;
  std::size_t written_ = 0;
  std::vector<asio::const_buffer> buffers_;
  std::uint64_t next_send_seq_ = 0;
  std::size_t front_sent_ = 0;  // bytes of out_[written_] already written
  std::uint64_t connections_ = 1;
  bool unix_ = false;       // a unix-domain socket: an end of stream is final
  bool in_flight_ = false;  // an asynchronous write is on the current connection (strand)
  std::optional<std::string> close_after_write_;  // close() waits for the write in flight
  bool writing_ = false;
  bool connected_ = true;
  bool closed_ = false;
};

// The acceptor's state lives in a shared core, so an accept handler that completes after the
// listener is gone still finds it alive.
struct AcceptCore : std::enable_shared_from_this<AcceptCore> {
  AcceptCore(asio::io_context& c, std::function<LinkHandler(const std::shared_ptr<Link>&)> f,
             const LinkOptions& o, Address a)
      : ctx(c), acceptor(c), on_accept(std::move(f)), options(o), address(std::move(a)) {
    if (options.tls.enabled() && address.transport == Address::Transport::tcp) {
      tls = make_tls_context(options.tls);
    }
  }

  void accept() {
    acceptor.async_accept([self = shared_from_this()](asio::error_code ec, Protocol::socket s) {
      if (ec) return;  // closed
      close_on_exec(s.native_handle());
      if (self->options.secret.empty()) {
        self->adopt(std::move(s));
      } else {
        // Nothing from the peer is read as a frame, and no link exists, before it proves
        // that it holds the job's secret.
        auto socket = std::make_shared<Protocol::socket>(std::move(s));
        auth::authenticate(*socket, self->ctx.get_executor(), self->options.secret, false,
                           self->options.dead_after, [self, socket](const std::string& error) {
                             if (error.empty()) return self->adopt(std::move(*socket));
                             std::fprintf(stderr, "baton: %s refused a connection: %s\n",
                                          self->address.to_string().c_str(), error.c_str());
                             asio::error_code ignored;
                             socket->close(ignored);
                           });
      }
      self->accept();
    });
  }

  void adopt(Protocol::socket s) {
    auto link = std::make_shared<StreamLink>(ctx, std::move(s), address.to_string() + " <- peer",
                                             options, tls);
    link->set_sessions(sessions);
    LinkHandler handler = on_accept(link);
    link->start(std::move(handler));
  }

  asio::io_context& ctx;
  asio::basic_socket_acceptor<Protocol> acceptor;
  std::function<LinkHandler(const std::shared_ptr<Link>&)> on_accept;
  LinkOptions options;
  Address address;
  std::shared_ptr<Sessions> sessions = std::make_shared<Sessions>();
  std::shared_ptr<asio::ssl::context> tls;
};

class StreamListener final : public Listener {
 public:
  StreamListener(IoThread& io, const Address& at,
                 std::function<LinkHandler(const std::shared_ptr<Link>&)> on_accept,
                 const LinkOptions& options)
      : core_(std::make_shared<AcceptCore>(io.impl().ctx, std::move(on_accept), options, at)) {
    const Protocol::endpoint ep = to_endpoint(core_->ctx, at);
    if (at.transport == Address::Transport::unix_socket && at.host[0] == '/') {
      ::unlink(at.host.c_str());  // a stale socket file from an earlier run
    }
    auto& acceptor = core_->acceptor;
    acceptor.open(ep.protocol());
    close_on_exec(acceptor.native_handle());
    if (at.transport == Address::Transport::tcp) {
      acceptor.set_option(asio::socket_base::reuse_address(true));
    }
    acceptor.bind(ep);
    acceptor.listen();
    if (at.transport == Address::Transport::tcp) {
      const auto local = acceptor.local_endpoint();
      asio::ip::tcp::endpoint tcp_ep;
      std::memcpy(tcp_ep.data(), local.data(), local.size());
      core_->address.port = tcp_ep.port();
    }
    core_->accept();
  }

  ~StreamListener() override {
    std::promise<void> done;
    asio::post(core_->ctx, [core = core_, &done] {
      asio::error_code ignored;
      core->acceptor.close(ignored);
      done.set_value();
    });
    done.get_future().wait();
    const Address& a = core_->address;
    if (a.transport == Address::Transport::unix_socket && a.host[0] == '/') {
      ::unlink(a.host.c_str());  // the socket file is ours; leave no litter
    }
  }

  Address address() const override { return core_->address; }

 private:
  std::shared_ptr<AcceptCore> core_;
};

}  // namespace

std::shared_ptr<Link> Link::connect(IoThread& io, const Address& to, LinkHandler handler,
                                    const LinkOptions& options) {
  auto& ctx = io.impl().ctx;
  Protocol::socket socket(ctx);
  try {
    const Protocol::endpoint ep = to_endpoint(ctx, to);
    socket.open(ep.protocol());
    close_on_exec(socket.native_handle());
    socket.connect(ep);
  } catch (const std::system_error& e) {
    throw std::runtime_error("cannot connect to " + to.to_string() + ": " + e.code().message() +
                             " (is the peer running and listening there?)");
  }
  std::shared_ptr<asio::ssl::context> tls;
  if (options.tls.enabled() && to.transport == Address::Transport::tcp) {
    tls = make_tls_context(options.tls);
  }
  auto link =
      std::make_shared<StreamLink>(ctx, std::move(socket), "-> " + to.to_string(), options, tls);
  link->set_dialler(to);
  link->start(std::move(handler));
  return link;
}

std::unique_ptr<Listener> Listener::listen(
    IoThread& io, const Address& at,
    std::function<LinkHandler(const std::shared_ptr<Link>&)> on_accept,
    const LinkOptions& options) {
  try {
    return std::make_unique<StreamListener>(io, at, std::move(on_accept), options);
  } catch (const std::system_error& e) {
    throw std::runtime_error("cannot listen on " + at.to_string() + ": " + e.code().message());
  }
}

}  // namespace baton::net
