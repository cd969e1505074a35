// Listeners: accept connections, authenticate them when the job has a secret, and adopt each
// as a link.

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <optional>

#include "baton/net/link.hpp"
#include "net/auth.hpp"
#include "net/link_impl.hpp"
#include "net/refusal_log.hpp"

namespace baton::net {
namespace {

using internal::make_tls_context;
using internal::Sessions;
using internal::StreamLink;
using internal::to_endpoint;
using Clock = std::chrono::steady_clock;

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
      internal::prepare_socket(s.native_handle());
      if (self->options.secret.empty()) {
        self->adopt(std::move(s));
      } else {
        // Nothing from the peer is read as a frame, and no link exists, before it proves
        // that it holds the job's secret.
        auto socket = std::make_shared<Protocol::socket>(std::move(s));
        auth::authenticate(*socket, self->ctx.get_executor(), self->options.secret, false,
                           self->options.dead_after, [self, socket](const std::string& error) {
                             if (error.empty()) return self->adopt(std::move(*socket));
                             self->refused(error);
                             asio::error_code ignored;
                             socket->close(ignored);
                           });
      }
      self->accept();
    });
  }

  /// Starts accepting, once the address is final (a tcp port 0 is the real port by now).
  void start() {
    refusals.emplace(address.to_string(), options.refusal_log_lines, options.refusal_log_window,
                     [this](const std::string& line) {
                       internal::log_line(options, detail::LogLevel::warn, line);
                     });
    accept();
  }

  /// Logs a refused connection, or counts it for the line that sums up the window.
  void refused(const std::string& error) {
    if (!refusals->refused(error, Clock::now())) return;
    if (!acceptor.is_open()) return refusals->flush(Clock::now());  // a handshake outlived stop()
    refusal_timer.expires_at(refusals->window_end());
    refusal_timer.async_wait([self = shared_from_this()](asio::error_code ec) {
      if (!ec) self->refusals->flush(Clock::now());
    });
  }

  /// On the I/O thread, as the listener goes: no accept after this, and nothing held back.
  void stop() {
    asio::error_code ignored;
    acceptor.close(ignored);
    refusal_timer.cancel();
    refusals->flush(Clock::now());
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
  std::shared_ptr<SSL_CTX> tls;
  std::optional<internal::RefusalLog> refusals;  // from start() on; used on the I/O thread only
  asio::steady_timer refusal_timer{ctx};
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
    internal::prepare_socket(acceptor.native_handle());
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
    core_->start();
  }

  ~StreamListener() override {
    std::promise<void> done;
    asio::post(core_->ctx, [core = core_, &done] {
      core->stop();
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
