#include "baton/net/link.hpp"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <climits>

#include <asio.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

namespace baton::net {

using Protocol = asio::generic::stream_protocol;

struct IoThread::Impl {
  asio::io_context ctx;
  asio::executor_work_guard<asio::io_context::executor_type> guard{ctx.get_executor()};
  std::thread thread;
};

IoThread::IoThread() : impl_(std::make_unique<Impl>()) {
  impl_->thread = std::thread([this] { impl_->ctx.run(); });
}

IoThread::~IoThread() {
  impl_->guard.reset();
  impl_->ctx.stop();
  impl_->thread.join();
}

namespace {

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

class StreamLink final : public Link {
 public:
  StreamLink(asio::io_context& ctx, Protocol::socket socket, std::string description,
             const DecodeLimits& limits)
      : strand_(asio::make_strand(ctx)),
        socket_(std::move(socket)),
        description_(std::move(description)),
        limits_(limits) {}

  void start(LinkHandler handler) {
    handler_ = std::move(handler);
    asio::post(strand_, [self = shared()] { self->read_prefix(); });
  }

  bool send(Envelope env) override {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    env.seq = next_send_seq_;
    Frame frame = encode_frame(env, limits_);  // may throw: then the seq is not used
    ++next_send_seq_;
    if (!writing_ && queue_.empty()) {
      // Nothing queued: write from this thread at once, sparing a wake-up of the I/O thread;
      // whatever the socket does not take now goes the asynchronous way.
      front_sent_ = write_now(frame);
      if (front_sent_ == frame.size()) {
        front_sent_ = 0;
        return true;
      }
    }
    queue_.push_back(std::move(frame));
    if (!writing_) {
      writing_ = true;
      asio::post(strand_, [self = shared()] { self->write_next(); });
    }
    return true;
  }

  void close(const std::string& reason) override {
    asio::post(strand_, [self = shared(), reason] { self->shutdown(reason); });
  }

  void close_and_wait(const std::string& reason) override {
    auto done = std::make_shared<std::promise<void>>();
    auto f = done->get_future();
    asio::post(strand_, [self = shared(), reason, done] {
      self->shutdown(reason);
      done->set_value();
    });
    f.wait();
  }

  bool closed() const override {
    std::lock_guard lock(mu_);
    return closed_;
  }

  std::string describe() const override { return description_; }

 private:
  std::shared_ptr<StreamLink> shared() {
    return std::static_pointer_cast<StreamLink>(shared_from_this());
  }

  // --- reading: prefix, header, then each part into its own buffer -------------------------

  /// Reads exactly `buffer`, then runs `next` on the strand; a failed read closes the link.
  void read_then(asio::mutable_buffer buffer, void (StreamLink::*next)()) {
    asio::async_read(
        socket_, buffer,
        asio::bind_executor(strand_, [self = shared(), next](asio::error_code ec, std::size_t) {
          if (ec) return self->shutdown(eof_reason(ec));
          ((*self).*next)();
        }));
  }

  void read_prefix() { read_then(asio::buffer(prefix_), &StreamLink::on_prefix); }

  void on_prefix() {
    std::size_t len = 0;
    try {
      len = decode_header_length(prefix_, limits_);
    } catch (const DecodeError& e) {
      return shutdown(e.what());
    }
    header_.assign(len, '\0');
    read_then(asio::buffer(header_), &StreamLink::on_header);
  }

  void on_header() {
    incoming_ = Envelope{};
    try {
      part_lengths_ = decode_header(Bytes::adopt(std::move(header_)), incoming_, limits_);
    } catch (const DecodeError& e) {
      return shutdown(e.what());
    }
    incoming_.body.parts.reserve(part_lengths_.size());
    read_part(0);
  }

  void read_part(std::size_t i) {
    if (i == part_lengths_.size()) return deliver();
    auto buf = std::make_shared<std::vector<std::byte>>(static_cast<std::size_t>(part_lengths_[i]));
    asio::async_read(
        socket_, asio::buffer(*buf),
        asio::bind_executor(strand_, [self = shared(), buf, i](asio::error_code ec, std::size_t) {
          if (ec) return self->shutdown(eof_reason(ec));
          self->incoming_.body.parts.push_back(Bytes::adopt(std::move(*buf)));
          self->read_part(i + 1);
        }));
  }

  void deliver() {
    const std::uint64_t seq = incoming_.seq;
    if (seq < next_recv_seq_) {
      read_prefix();  // a duplicate of a frame already delivered
      return;
    }
    if (seq > next_recv_seq_) {
      return shutdown("frame sequence gap: expected " + std::to_string(next_recv_seq_) + ", got " +
                      std::to_string(seq));
    }
    ++next_recv_seq_;
    if (handler_.on_envelope) {
      try {
        handler_.on_envelope(std::move(incoming_));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "baton: link %s: envelope handler threw: %s\n", description_.c_str(),
                     e.what());
      }
    }
    read_prefix();
  }

  // --- writing: one frame at a time, header and parts gathered ------------------------------

  void write_next() {
    Frame* frame = nullptr;
    {
      std::lock_guard lock(mu_);
      if (closed_ || queue_.empty()) {
        writing_ = false;
        return;
      }
      frame = &queue_.front();
    }
    buffers_.clear();
    std::size_t skip = front_sent_;  // bytes a direct write already sent
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
    asio::async_write(
        socket_, buffers_,
        asio::bind_executor(strand_, [self = shared()](asio::error_code ec, std::size_t) {
          if (ec) return self->shutdown("write failed: " + ec.message());
          {
            std::lock_guard lock(self->mu_);
            self->queue_.pop_front();
            self->front_sent_ = 0;
          }
          self->write_next();
        }));
  }

  /// One non-blocking gather write of a whole frame; returns the bytes the socket took.
  std::size_t write_now(const Frame& frame) {
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
    if (ec == asio::error::eof) return "peer closed the link";
    if (ec == asio::error::operation_aborted) return "link closed";
    return "read failed: " + ec.message();
  }

  void shutdown(const std::string& reason) {
    {
      std::lock_guard lock(mu_);
      if (closed_) return;
      closed_ = true;
      queue_.clear();
    }
    if (std::getenv("BATON_DEBUG_LINKS") != nullptr) {
      std::fprintf(stderr, "baton: link %s closed: %s\n", description_.c_str(), reason.c_str());
    }
    asio::error_code ignored;
    socket_.shutdown(Protocol::socket::shutdown_both, ignored);
    socket_.close(ignored);
    if (handler_.on_closed) handler_.on_closed(reason);
    handler_ = {};  // drop captured state; the link may outlive its owner's interest
  }

  asio::strand<asio::io_context::executor_type> strand_;
  Protocol::socket socket_;
  std::string description_;
  DecodeLimits limits_;
  LinkHandler handler_;

  // Reading state, touched only on the strand.
  std::byte prefix_[4] = {};
  std::string header_;
  Envelope incoming_;
  std::vector<std::uint64_t> part_lengths_;
  std::uint64_t next_recv_seq_ = 0;

  // Writing state.
  mutable std::mutex mu_;
  std::deque<Frame> queue_;  // front is being written; deque keeps it in place while we push
  std::vector<asio::const_buffer> buffers_;
  std::uint64_t next_send_seq_ = 0;
  std::size_t front_sent_ = 0;  // bytes of queue_.front() already written
  bool writing_ = false;
  bool closed_ = false;
};

// The acceptor's state lives in a shared core, so an accept handler that completes after the
// listener is gone still finds it alive.
struct AcceptCore : std::enable_shared_from_this<AcceptCore> {
  AcceptCore(asio::io_context& c, std::function<LinkHandler(const std::shared_ptr<Link>&)> f,
             const DecodeLimits& l, Address a)
      : ctx(c), acceptor(c), on_accept(std::move(f)), limits(l), address(std::move(a)) {}

  void accept() {
    acceptor.async_accept([self = shared_from_this()](asio::error_code ec, Protocol::socket s) {
      if (ec) return;  // closed
      auto link = std::make_shared<StreamLink>(
          self->ctx, std::move(s), self->address.to_string() + " <- peer", self->limits);
      LinkHandler handler = self->on_accept(link);
      link->start(std::move(handler));
      self->accept();
    });
  }

  asio::io_context& ctx;
  asio::basic_socket_acceptor<Protocol> acceptor;
  std::function<LinkHandler(const std::shared_ptr<Link>&)> on_accept;
  DecodeLimits limits;
  Address address;
};

class StreamListener final : public Listener {
 public:
  StreamListener(IoThread& io, const Address& at,
                 std::function<LinkHandler(const std::shared_ptr<Link>&)> on_accept,
                 const DecodeLimits& limits)
      : core_(std::make_shared<AcceptCore>(io.impl().ctx, std::move(on_accept), limits, at)) {
    const Protocol::endpoint ep = to_endpoint(core_->ctx, at);
    if (at.transport == Address::Transport::unix_socket && at.host[0] == '/') {
      ::unlink(at.host.c_str());  // a stale socket file from an earlier run
    }
    auto& acceptor = core_->acceptor;
    acceptor.open(ep.protocol());
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
                                    const DecodeLimits& limits) {
  auto& ctx = io.impl().ctx;
  Protocol::socket socket(ctx);
  try {
    const Protocol::endpoint ep = to_endpoint(ctx, to);
    socket.connect(ep);
  } catch (const std::system_error& e) {
    throw std::runtime_error("cannot connect to " + to.to_string() + ": " + e.code().message() +
                             " (is the peer running and listening there?)");
  }
  auto link = std::make_shared<StreamLink>(ctx, std::move(socket), "-> " + to.to_string(), limits);
  link->start(std::move(handler));
  return link;
}

std::unique_ptr<Listener> Listener::listen(
    IoThread& io, const Address& at,
    std::function<LinkHandler(const std::shared_ptr<Link>&)> on_accept,
    const DecodeLimits& limits) {
  try {
    return std::make_unique<StreamListener>(io, at, std::move(on_accept), limits);
  } catch (const std::system_error& e) {
    throw std::runtime_error("cannot listen on " + at.to_string() + ": " + e.code().message());
  }
}

}  // namespace baton::net
