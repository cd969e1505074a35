#pragma once

// Internal: the sending half of a TLS link's records, sealed by the link itself.
//
// OpenSSL runs the handshake and reads the peer's records. Once the handshake is done, the
// sending direction is ours, as kernel TLS would take it over: a link seals its frames into
// TLS 1.3 records (RFC 8446, 5.2) with the traffic secret OpenSSL derived, and writes them to the
// socket from whichever thread sends, under the link's lock, as a plain link writes its bytes.
// OpenSSL's own sending state is never used after the handshake. For that:
// - the context allows TLS 1.3 only, with AES-GCM suites, and sends no session tickets (a
//   ticket would be a record OpenSSL sends after the handshake);
// - nothing sends a close_notify (a link says bye in a frame of its own).
// The peer is an ordinary OpenSSL reader: these are standard records.

#include <openssl/ssl.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace baton::net::internal {

/// Makes `ctx`'s connections fit for sealing (see above): TLS 1.3 only, AES-GCM, no tickets,
/// and each connection's traffic secrets kept for its TlsSender.
void configure_tls_records(SSL_CTX* ctx);

/// What seals the records one end of a TLS connection sends. It lives with the connection's
/// SSL object, so a connection handed to another link carries its sequence numbers along. Not
/// thread-safe: its link calls it under the link's lock or as the link's only writer.
class TlsSender {
 public:
  /// The sender of `ssl`, once its handshake is done; nullptr if the handshake gave no traffic
  /// secret for it (not TLS 1.3, or a context not configured above).
  static TlsSender* of(SSL* ssl);

  /// Seals bytes [from, from + n) of `pieces` (taken as one sequence) as records of at most
  /// 16 KiB of plaintext each, appended to `out`.
  void seal(std::span<const std::span<const std::byte>> pieces, std::size_t from, std::size_t n,
            std::string& out);

  /// How many bytes sealing `n` bytes of plaintext adds: 22 a record.
  static std::size_t overhead(std::size_t n);

  /// Records sealed so far: the next record's sequence number.
  std::uint64_t records() const { return seq_; }

  /// Keyed from `secret`, the traffic secret of what `ssl` sends, for its cipher suite.
  TlsSender(const std::string& secret, const SSL* ssl);
  TlsSender(const TlsSender&) = delete;
  TlsSender& operator=(const TlsSender&) = delete;
  ~TlsSender();

 private:
  void* cipher_ = nullptr;  // EVP_CIPHER_CTX, keyed once
  unsigned char iv_[12] = {};
  std::uint64_t seq_ = 0;
};

}  // namespace baton::net::internal
