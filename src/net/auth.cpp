#include "net/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string_view>

#include "baton/net/link.hpp"

namespace baton::net {
namespace auth {
namespace {

constexpr std::string_view kMagic = "BATONAUTH1";
constexpr std::size_t kNonce = 32;
constexpr std::size_t kMac = 32;

using Mac = std::array<unsigned char, kMac>;

void random_bytes(unsigned char* out, std::size_t n) {
  if (RAND_bytes(out, static_cast<int>(n)) != 1) {
    throw std::runtime_error("OpenSSL's RAND_bytes failed: no randomness for authentication");
  }
}

/// HMAC-SHA256(secret, label || a || b).
Mac mac(const std::string& secret, std::string_view label, const unsigned char* a,
        const unsigned char* b) {
  std::string msg(label);
  msg.append(reinterpret_cast<const char*>(a), kNonce);
  msg.append(reinterpret_cast<const char*>(b), kNonce);
  Mac out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out.data(), &len);
  return out;
}

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
      std::memcpy(challenge_.data(), kMagic.data(), kMagic.size());
      random_bytes(challenge_.data() + kMagic.size(), kNonce);
      write(challenge_.data(), challenge_.size(), &Handshake::await_answer);
    }
  }

 private:
  using Step = void (Handshake::*)();

  void read(unsigned char* data, std::size_t n, Step next) {
    asio::async_read(socket_, asio::buffer(data, n),
                     asio::bind_executor(
                         ex_, [self = shared_from_this(), next](asio::error_code ec, std::size_t) {
                           if (self->finished_) return;
                           if (ec) return self->io_failed(ec);
                           ((*self).*next)();
                         }));
  }
  void write(const unsigned char* data, std::size_t n, Step next) {
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
    if (std::memcmp(challenge_.data(), kMagic.data(), kMagic.size()) != 0) {
      return finish(
          "the peer did not open with baton's authentication (not a baton proc, or one "
          "without a job secret)");
    }
    const unsigned char* theirs = challenge_.data() + kMagic.size();
    random_bytes(answer_.data(), kNonce);
    const Mac m = mac(secret_, "dial", theirs, answer_.data());
    std::memcpy(answer_.data() + kNonce, m.data(), kMac);
    write(answer_.data(), answer_.size(), &Handshake::await_proof);
  }
  void await_proof() { read(proof_.data(), proof_.size(), &Handshake::on_proof); }
  void on_proof() {
    const Mac expected = mac(secret_, "accept", answer_.data(), challenge_.data() + kMagic.size());
    if (CRYPTO_memcmp(expected.data(), proof_.data(), kMac) != 0) {
      return finish("the peer failed authentication: it does not hold this job's secret");
    }
    finish({});
  }

  // Acceptor: check the answer, then prove ourselves.
  void await_answer() { read(answer_.data(), answer_.size(), &Handshake::on_answer); }
  void on_answer() {
    const unsigned char* ours = challenge_.data() + kMagic.size();
    const Mac expected = mac(secret_, "dial", ours, answer_.data());
    if (CRYPTO_memcmp(expected.data(), answer_.data() + kNonce, kMac) != 0) {
      return finish(
          "the peer failed authentication: it does not hold this job's secret (or skipped "
          "the handshake)");
    }
    const Mac m = mac(secret_, "accept", answer_.data(), ours);
    std::memcpy(proof_.data(), m.data(), kMac);
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
  std::array<unsigned char, kMagic.size() + kNonce> challenge_{};
  std::array<unsigned char, kNonce + kMac> answer_{};
  std::array<unsigned char, kMac> proof_{};
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
  std::array<unsigned char, 32> raw{};
  auth::random_bytes(raw.data(), raw.size());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

}  // namespace baton::net
