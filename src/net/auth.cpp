#include "net/auth.hpp"

#include <array>
#include <cstdint>
#include <memory>

#include "baton/net/link.hpp"
#include "net/handshake.hpp"

namespace baton::net {
namespace auth {
namespace {

class Handshake : public std::enable_shared_from_this<Handshake> {
 public:
  Handshake(Protocol::socket& socket, const asio::any_io_executor& ex, std::string secret,
            bool dialler, std::function<void(const std::string&)> done)
      : socket_(socket),
        ex_(ex),
        timer_(ex),
        secret_(std::move(secret)),
        dialler_(dialler),
        done_(std::move(done)) {}

  void start(std::chrono::milliseconds timeout) {
    timer_.expires_after(timeout);
    timer_.async_wait([self = shared_from_this(), timeout](asio::error_code ec) {
      if (ec || self->finished_) return;
      self->finish("the peer did not complete authentication within " +
                   std::to_string(timeout.count()) + " ms");
    });
    if (dialler_) {
      read(challenge_.data(), challenge_.size(), &Handshake::on_challenge);
    } else {
      challenge_ = make_challenge();
      write(challenge_.data(), challenge_.size(), &Handshake::await_answer);
    }
  }

 private:
  using Step = void (Handshake::*)();

  void read(std::uint8_t* data, std::size_t n, Step next) {
    asio::async_read(socket_, asio::buffer(data, n),
                     asio::bind_executor(
                         ex_, [self = shared_from_this(), next](asio::error_code ec, std::size_t) {
                           if (self->finished_) return;
                           if (ec) return self->io_failed(ec);
                           ((*self).*next)();
                         }));
  }
  void write(const std::uint8_t* data, std::size_t n, Step next) {
    asio::async_write(socket_, asio::buffer(data, n),
                      asio::bind_executor(
                          ex_, [self = shared_from_this(), next](asio::error_code ec, std::size_t) {
                            if (self->finished_) return;
                            if (ec) return self->io_failed(ec);
                            ((*self).*next)();
                          }));
  }
  void io_failed(const asio::error_code& ec) {
    if (ec == asio::error::eof || ec == asio::error::connection_reset) {
      return finish(dialler_ ? "the peer closed the connection during authentication (it "
                               "refused our proof of the job's secret, or is not a baton proc)"
                             : "the peer closed the connection during authentication");
    }
    finish("authentication failed: " + ec.message());
  }

  // Dialler: check the challenge, answer it, then check the acceptor's proof.
  void on_challenge() {
    if (auto refused = answer_challenge(challenge_, secret_, answer_); !refused.empty()) {
      return finish(refused);
    }
    write(answer_.data(), answer_.size(), &Handshake::await_proof);
  }
  void await_proof() { read(proof_.data(), proof_.size(), &Handshake::on_proof); }
  void on_proof() { finish(check_proof(challenge_, answer_, proof_, secret_)); }

  // Acceptor: check the answer, then prove ourselves.
  void await_answer() { read(answer_.data(), answer_.size(), &Handshake::on_answer); }
  void on_answer() {
    if (auto refused = check_answer(challenge_, answer_, secret_, proof_); !refused.empty()) {
      return finish(refused);
    }
    write(proof_.data(), proof_.size(), &Handshake::accepted);
  }
  void accepted() { finish({}); }

  void finish(const std::string& error) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    if (!error.empty()) {
      asio::error_code ignored;
      socket_.cancel(ignored);
    }
    auto done = std::move(done_);
    done(error);
  }

  Protocol::socket& socket_;
  asio::any_io_executor ex_;
  asio::steady_timer timer_;
  std::string secret_;
  bool dialler_;
  std::function<void(const std::string&)> done_;
  bool finished_ = false;
  Challenge challenge_{};
  Answer answer_{};
  Proof proof_{};
};

}  // namespace

void authenticate(Protocol::socket& socket, const asio::any_io_executor& ex,
                  const std::string& secret, bool dialler, std::chrono::milliseconds timeout,
                  std::function<void(const std::string& error)> done) {
  auto h = std::make_shared<Handshake>(socket, ex, secret, dialler, std::move(done));
  h->start(timeout);
}

}  // namespace auth

std::string new_job_secret() {
  std::array<std::uint8_t, 32> raw{};
  auth::random_bytes(raw.data(), raw.size());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::uint8_t c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

}  // namespace baton::net
