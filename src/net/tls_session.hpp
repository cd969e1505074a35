#pragma once

// Internal: TLS on one connection of a link, with the record layer the link's own.
//
// OpenSSL runs the handshake, reading and writing the socket itself. Once the handshake is done,
// both directions are the link's, as kernel TLS takes them over: the link seals its frames into
// TLS 1.3 records (RFC 8446, 5.2) from whichever thread sends, under the link's lock, as a plain
// link writes its bytes, and opens the peer's records as it reads, straight into the frame's
// buffers where a record fits. The keys come from the traffic secrets OpenSSL's key log hands
// over. OpenSSL never touches the connection after the handshake. For that:
// - the context allows TLS 1.3 only, with AES-GCM suites, and sends no session tickets (a
//   ticket would be a record OpenSSL sends after the handshake);
// - OpenSSL reads the handshake with no read-ahead, so it takes nothing from the socket past
//   the handshake's last record;
// - a record that is not application data after the handshake (a key update, a ticket, an
//   alert) ends the link, saying what it was; nothing sends a close_notify (a link says bye in a
//   frame of its own).
// The records are standard: an OpenSSL peer reads and writes them unchanged.

#include <openssl/ssl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "baton/net/link.hpp"

namespace baton::net::internal {

/// The TLS context of links with `tls`: mutual, TLS 1.3, peers checked against the CA.
std::shared_ptr<SSL_CTX> make_tls_context(const TlsOptions& tls);

class TlsSession {
 public:
  /// TLS over the connected socket `fd` (which it never closes), as the client (the dialler) or
  /// the server.
  TlsSession(SSL_CTX* ctx, int fd, bool client);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  enum class Want { nothing, read, write };
  /// Runs the handshake as far as the socket allows: `nothing` once it is done, or it failed
  /// (then `error` says why); otherwise call again once the socket is readable or writable.
  Want handshake(std::string& error);

  // --- sending, once the handshake is done (under the link's lock, or by its only writer) ----
  /// Seals bytes [from, from + n) of `pieces` (taken as one sequence) as records of at most
  /// 16 KiB of plaintext each, appended to `out`.
  void seal(std::span<const std::span<const std::byte>> pieces, std::size_t from, std::size_t n,
            std::string& out);

  // --- receiving (the link's strand) ---------------------------------------------------------
  /// Where the next read from the socket goes; then received(n) with what it read.
  std::span<std::byte> read_space();
  void received(std::size_t n) { in_end_ += n; }
  /// Fills `out` with the peer's plaintext as far as what was received allows; returns how much.
  /// A record that fails its check or is not application data sets `error`; a close_notify
  /// sets `closed`.
  std::size_t take(std::span<std::byte> out, std::string& error, bool& closed);

  // The key log callback (tls_session.cpp) hands the traffic secrets over.
  void set_secret(bool ours, std::string secret) { (ours ? tx_ : rx_).secret = std::move(secret); }

 private:
  struct Direction {
    std::string secret;      // until keyed
    void* cipher = nullptr;  // EVP_CIPHER_CTX
    unsigned char iv[12] = {};
    std::uint64_t seq = 0;
    void nonce(unsigned char out[12]) const;
  };
  void key(Direction& d, bool encrypt);
  /// Opens the record at in_ + in_begin_ into `dst` (room for its whole body); returns its
  /// content's length, or sets `error` / `closed`.
  std::size_t open(std::byte* dst, std::size_t body, std::string& error, bool& closed);

  SSL* ssl_;
  Direction tx_, rx_;
  std::vector<std::byte> in_;  // ciphertext received, [in_begin_, in_end_) not yet opened
  std::size_t in_begin_ = 0, in_end_ = 0;
  std::vector<std::byte> plain_;  // a record opened that did not fit where it was wanted
  std::size_t plain_begin_ = 0, plain_end_ = 0;
};

}  // namespace baton::net::internal
