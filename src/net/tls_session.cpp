// TLS on one connection of a link (see tls_session.hpp): OpenSSL's handshake over the socket,
// then TLS 1.3 records sealed and opened here with AES-GCM, keyed from the traffic secrets.

#include "net/tls_session.hpp"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/tls1.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>

namespace baton::net::internal {
namespace {

constexpr std::size_t kHeader = 5;
constexpr std::size_t kMaxPlain = std::size_t{1} << 14;  // a record's most plaintext
constexpr std::size_t kTag = 16;                         // AES-GCM's
constexpr std::size_t kMaxBody = kMaxPlain + 256;        // RFC 8446: a record's most ciphertext
constexpr unsigned char kAlert = 21;
constexpr unsigned char kHandshake = 22;
constexpr unsigned char kApplicationData = 23;

[[noreturn]] void fail(const char* what) {
  throw std::runtime_error(std::string("TLS record layer: ") + what + " failed");
}

/// How many bytes sealing `n` bytes of plaintext adds: 22 a record.
std::size_t overhead(std::size_t n) {
  const std::size_t records = std::max<std::size_t>(1, (n + kMaxPlain - 1) / kMaxPlain);
  return records * (kHeader + 1 + kTag);
}

/// What OpenSSL's error queue says, emptied.
std::string openssl_errors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

// The handshake's socket I/O: a BIO over the link's socket that never blocks and never raises
// SIGPIPE (OpenSSL's socket BIO writes with write(2)).
int fd_of(BIO* b) {
  return static_cast<int>(reinterpret_cast<std::intptr_t>(BIO_get_data(b)));
}

int bio_write(BIO* b, const char* data, int n) {
  BIO_clear_retry_flags(b);
  const ssize_t w =
      ::send(fd_of(b), data, static_cast<std::size_t>(n), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_write(b);
  }
  return static_cast<int>(w);
}

int bio_read(BIO* b, char* data, int n) {
  BIO_clear_retry_flags(b);
  const ssize_t r = ::recv(fd_of(b), data, static_cast<std::size_t>(n), MSG_DONTWAIT);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(b);
  return static_cast<int>(r);
}

long bio_ctrl(BIO* /*b*/, int cmd, long /*num*/, void* /*ptr*/) {
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

BIO* socket_bio(int fd) {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "baton socket");
    if (m == nullptr || BIO_meth_set_write(m, bio_write) != 1 ||
        BIO_meth_set_read(m, bio_read) != 1 || BIO_meth_set_ctrl(m, bio_ctrl) != 1) {
      fail("making the socket BIO");
    }
    return m;
  }();
  BIO* b = BIO_new(method);
  if (b == nullptr) fail("making a socket BIO");
  BIO_set_data(b, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)));
  BIO_set_init(b, 1);
  return b;
}

int session_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

/// The key log: OpenSSL hands each secret of the handshake over as a line, "LABEL <client
/// random in hex> <secret in hex>". The two traffic secrets are kept.
void key_log(const SSL* ssl, const char* line) {
  auto* session = static_cast<TlsSession*>(SSL_get_ex_data(ssl, session_index()));
  if (session == nullptr) return;
  const std::string_view l(line);
  const bool client = l.starts_with("CLIENT_TRAFFIC_SECRET_0 ");
  if (!client && !l.starts_with("SERVER_TRAFFIC_SECRET_0 ")) return;
  const std::string_view hex = l.substr(l.rfind(' ') + 1);
  auto nibble = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  std::string secret;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    secret.push_back(static_cast<char>((nibble(hex[i]) << 4) | nibble(hex[i + 1])));
  }
  session->set_secret(client == (SSL_is_server(ssl) == 0), std::move(secret));
}

/// HKDF-Expand-Label (RFC 8446, 7.1) with an empty context.
std::string expand_label(const std::string& secret, std::string_view label, std::size_t length,
                         const char* digest) {
  std::string info;
  info.push_back(static_cast<char>(length >> 8));
  info.push_back(static_cast<char>(length & 0xff));
  const std::string full = "tls13 " + std::string(label);
  info.push_back(static_cast<char>(full.size()));
  info += full;
  info.push_back(0);
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  if (kdf == nullptr) fail("fetching HKDF");
  EVP_KDF_CTX* kctx = EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  if (kctx == nullptr) fail("making an HKDF context");
  int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
  std::string key = secret;
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, const_cast<char*>(digest), 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, key.data(), key.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info.data(), info.size()),
      OSSL_PARAM_construct_end()};
  std::string out(length, '\0');
  const int ok =
      EVP_KDF_derive(kctx, reinterpret_cast<unsigned char*>(out.data()), out.size(), params);
  EVP_KDF_CTX_free(kctx);
  if (ok != 1) fail("HKDF-Expand-Label");
  return out;
}

}  // namespace

std::shared_ptr<SSL_CTX> make_tls_context(const TlsOptions& tls) {
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_method()), SSL_CTX_free);
  if (!ctx) fail("making a TLS context");
  SSL_CTX* c = ctx.get();
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(c, tls.cert_file.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(c, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_load_verify_locations(c, tls.ca_file.c_str(), nullptr) != 1) {
    throw std::runtime_error("cannot set up TLS with certificate " + tls.cert_file + ", key " +
                             tls.key_file + " and CA " + tls.ca_file + ": " + openssl_errors() +
                             " (check the files exist and are PEM)");
  }
  SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  if (SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_ciphersuites(c, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384") != 1 ||
      SSL_CTX_set_num_tickets(c, 0) != 1) {
    fail("configuring the TLS context");
  }
  SSL_CTX_set_read_ahead(c, 0);
  SSL_CTX_set_keylog_callback(c, key_log);
  return ctx;
}

TlsSession::TlsSession(SSL_CTX* ctx, int fd, bool client) : ssl_(SSL_new(ctx)) {
  if (ssl_ == nullptr) fail("making a TLS connection");
  SSL_set_ex_data(ssl_, session_index(), this);
  BIO* bio = socket_bio(fd);
  SSL_set_bio(ssl_, bio, bio);
  if (client) {
    SSL_set_connect_state(ssl_);
  } else {
    SSL_set_accept_state(ssl_);
  }
}

TlsSession::~TlsSession() {
  SSL_free(ssl_);
  EVP_CIPHER_CTX_free(static_cast<EVP_CIPHER_CTX*>(tx_.cipher));
  EVP_CIPHER_CTX_free(static_cast<EVP_CIPHER_CTX*>(rx_.cipher));
}

TlsSession::Want TlsSession::handshake(std::string& error) {
  ERR_clear_error();
  errno = 0;
  const int rc = SSL_do_handshake(ssl_);
  if (rc == 1) {
    if (SSL_version(ssl_) != TLS1_3_VERSION || tx_.secret.empty() || rx_.secret.empty()) {
      error = "the connection is not TLS 1.3 with traffic secrets to key its records";
      return Want::nothing;
    }
    key(tx_, true);
    key(rx_, false);
    return Want::nothing;
  }
  switch (SSL_get_error(ssl_, rc)) {
    case SSL_ERROR_WANT_READ:
      return Want::read;
    case SSL_ERROR_WANT_WRITE:
      return Want::write;
    case SSL_ERROR_SYSCALL:
      error = errno != 0 ? std::string(std::strerror(errno))
                         : "the peer closed the connection during the handshake";
      break;
    default:
      error = openssl_errors();
      if (error.empty()) error = "handshake failed";
  }
  return Want::nothing;
}

void TlsSession::key(Direction& d, bool encrypt) {
  const SSL_CIPHER* suite = SSL_get_current_cipher(ssl_);
  const std::uint32_t id = suite != nullptr ? SSL_CIPHER_get_id(suite) : 0;
  const bool aes128 = id == TLS1_3_CK_AES_128_GCM_SHA256;
  if (!aes128 && id != TLS1_3_CK_AES_256_GCM_SHA384) fail("a suite other than AES-GCM");
  const char* digest = aes128 ? "SHA256" : "SHA384";
  const std::string k = expand_label(d.secret, "key", aes128 ? 16 : 32, digest);
  const std::string iv = expand_label(d.secret, "iv", sizeof d.iv, digest);
  std::memcpy(d.iv, iv.data(), sizeof d.iv);
  d.secret.clear();
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  if (ctx == nullptr) fail("making a cipher context");
  d.cipher = ctx;
  if (EVP_CipherInit_ex(ctx, aes128 ? EVP_aes_128_gcm() : EVP_aes_256_gcm(), nullptr,
                        reinterpret_cast<const unsigned char*>(k.data()), nullptr,
                        encrypt ? 1 : 0) != 1) {
    fail("keying AES-GCM");
  }
}

void TlsSession::Direction::nonce(unsigned char out[12]) const {
  std::memcpy(out, iv, sizeof iv);
  for (std::size_t i = 0; i < 8; ++i) out[11 - i] ^= static_cast<unsigned char>(seq >> (8 * i));
}

void TlsSession::seal(std::span<const std::span<const std::byte>> pieces, std::size_t from,
                      std::size_t n, std::string& out) {
  auto* ctx = static_cast<EVP_CIPHER_CTX*>(tx_.cipher);
  std::size_t piece = 0;
  std::size_t offset = from;
  while (piece < pieces.size() && offset >= pieces[piece].size()) {
    offset -= pieces[piece].size();
    ++piece;
  }
  out.reserve(out.size() + n + overhead(n));
  while (n > 0) {
    const std::size_t plain = std::min(n, kMaxPlain);
    const std::size_t length = plain + 1 + kTag;  // the content type byte, then the tag
    const unsigned char header[kHeader] = {kApplicationData, 3, 3,
                                           static_cast<unsigned char>(length >> 8),
                                           static_cast<unsigned char>(length & 0xff)};
    unsigned char nonce[12];
    tx_.nonce(nonce);
    int written = 0;
    if (EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce) != 1 ||
        EVP_EncryptUpdate(ctx, nullptr, &written, header, kHeader) != 1) {
      fail("starting a record");
    }
    out.append(reinterpret_cast<const char*>(header), kHeader);
    const std::size_t at = out.size();
    out.resize(at + length);
    auto* dst = reinterpret_cast<unsigned char*>(out.data() + at);
    for (std::size_t left = plain; left > 0;) {
      const std::size_t take = std::min(left, pieces[piece].size() - offset);
      if (EVP_EncryptUpdate(ctx, dst, &written,
                            reinterpret_cast<const unsigned char*>(pieces[piece].data() + offset),
                            static_cast<int>(take)) != 1) {
        fail("sealing a record");
      }
      dst += written;
      left -= take;
      offset += take;
      while (piece < pieces.size() && offset == pieces[piece].size()) {
        offset = 0;
        ++piece;
      }
    }
    const unsigned char type = kApplicationData;
    if (EVP_EncryptUpdate(ctx, dst, &written, &type, 1) != 1) fail("sealing a record");
    dst += written;
    if (EVP_EncryptFinal_ex(ctx, dst, &written) != 1) fail("finishing a record");
    dst += written;
    if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTag), dst) != 1) {
      fail("taking a record's tag");
    }
    ++tx_.seq;
    n -= plain;
  }
}

std::span<std::byte> TlsSession::read_space() {
  constexpr std::size_t kRead = std::size_t{64} << 10;  // at most, a read from the socket
  if (in_begin_ == in_end_) in_begin_ = in_end_ = 0;
  if (in_.size() - in_end_ < kHeader + kMaxBody && in_begin_ > 0) {
    std::memmove(in_.data(), in_.data() + in_begin_, in_end_ - in_begin_);
    in_end_ -= in_begin_;
    in_begin_ = 0;
  }
  if (in_.size() - in_end_ < kHeader + kMaxBody) in_.resize(std::max(in_end_ + kRead, in_.size()));
  return {in_.data() + in_end_, in_.size() - in_end_};
}

std::size_t TlsSession::take(std::span<std::byte> out, std::string& error, bool& closed) {
  std::size_t got = std::min(out.size(), plain_end_ - plain_begin_);
  if (got > 0) {
    std::memcpy(out.data(), plain_.data() + plain_begin_, got);
    plain_begin_ += got;
  }
  while (got < out.size() && in_end_ - in_begin_ >= kHeader) {
    const auto* h = reinterpret_cast<const unsigned char*>(in_.data() + in_begin_);
    const std::size_t body = (std::size_t{h[3]} << 8) | h[4];
    if (h[0] != kApplicationData || h[1] != 3 || h[2] != 3 || body < 1 + kTag || body > kMaxBody) {
      error = "bytes that are not a TLS 1.3 record came (type " + std::to_string(h[0]) +
              ", length " + std::to_string(body) + ")";
      return got;
    }
    if (in_end_ - in_begin_ < kHeader + body) break;  // the rest of the record is to come
    // Opened in place where it fits, or set aside for the next take.
    const bool fits = out.size() - got >= body - kTag;
    if (!fits) plain_.resize(std::max(plain_.size(), body - kTag));
    std::byte* dst = fits ? out.data() + got : plain_.data();
    const std::size_t n = open(dst, body, error, closed);
    in_begin_ += kHeader + body;
    if (!error.empty() || closed) return got;
    if (fits) {
      got += n;
    } else {
      plain_begin_ = 0;
      plain_end_ = n;
      const std::size_t m = std::min(out.size() - got, n);
      std::memcpy(out.data() + got, plain_.data(), m);
      plain_begin_ = m;
      got += m;
    }
  }
  return got;
}

std::size_t TlsSession::open(std::byte* dst, std::size_t body, std::string& error, bool& closed) {
  auto* ctx = static_cast<EVP_CIPHER_CTX*>(rx_.cipher);
  const auto* header = reinterpret_cast<const unsigned char*>(in_.data() + in_begin_);
  const unsigned char* cipher = header + kHeader;
  const std::size_t length = body - kTag;
  unsigned char nonce[12];
  rx_.nonce(nonce);
  auto* out = reinterpret_cast<unsigned char*>(dst);
  int written = 0;
  int last = 0;
  if (EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce) != 1 ||
      EVP_DecryptUpdate(ctx, nullptr, &written, header, kHeader) != 1 ||
      EVP_DecryptUpdate(ctx, out, &written, cipher, static_cast<int>(length)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTag),
                          const_cast<unsigned char*>(cipher + length)) != 1 ||
      EVP_DecryptFinal_ex(ctx, out + written, &last) != 1) {
    error = "TLS record " + std::to_string(rx_.seq) +
            " failed its integrity check (corrupted or forged on the way)";
    return 0;
  }
  ++rx_.seq;
  // The content, then its type, then zeros of padding.
  std::size_t end = length;
  while (end > 0 && out[end - 1] == 0) --end;
  if (end == 0) {
    error = "a TLS record without a content type came";
    return 0;
  }
  const unsigned char type = out[end - 1];
  if (type == kApplicationData) return end - 1;
  if (type == kAlert && end - 1 >= 2 && out[1] == 0) {  // close_notify
    closed = true;
    return 0;
  }
  error = type == kAlert ? "the peer sent TLS alert " + std::to_string(end > 2 ? out[1] : 0)
          : type == kHandshake
              ? std::string(
                    "the peer sent a TLS handshake message after the handshake (a key "
                    "update or a ticket), which links do not take")
              : "a TLS record of content type " + std::to_string(type) + " came";
  return 0;
}

}  // namespace baton::net::internal
