// The sending half of a TLS link's records (see tls_record.hpp): TLS 1.3 record protection
// with AES-GCM, keyed from the traffic secret OpenSSL's key log hands over at the handshake.

#include "net/tls_record.hpp"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/tls1.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string_view>

namespace baton::net::internal {
namespace {

constexpr std::size_t kMaxPlain = std::size_t{1} << 14;  // a record's most plaintext
constexpr std::size_t kTag = 16;                         // AES-GCM's
constexpr unsigned char kApplicationData = 23;

/// A connection's traffic secret for the direction it sends, until its sender is made.
struct Slot {
  std::string secret;
  std::unique_ptr<TlsSender> sender;
};

void free_slot(void* /*parent*/, void* ptr, CRYPTO_EX_DATA* /*ad*/, int /*idx*/, long /*argl*/,
               void* /*argp*/) {
  delete static_cast<Slot*>(ptr);
}

int slot_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, free_slot);
  return index;
}

[[noreturn]] void fail(const char* what) {
  throw std::runtime_error(std::string("TLS record layer: ") + what + " failed");
}

/// The key log: OpenSSL hands each secret of the handshake over as a line, "LABEL
/// <client random in hex> <secret in hex>". The one for what this end sends is kept.
void key_log(const SSL* ssl, const char* line) {
  const std::string_view mine =
      SSL_is_server(ssl) != 0 ? "SERVER_TRAFFIC_SECRET_0 " : "CLIENT_TRAFFIC_SECRET_0 ";
  const std::string_view l(line);
  if (l.substr(0, mine.size()) != mine) return;
  const std::string_view hex = l.substr(l.rfind(' ') + 1);
  auto nibble = [](char c) {
    return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;  // OpenSSL writes lowercase hex
  };
  auto slot = std::make_unique<Slot>();
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    slot->secret.push_back(static_cast<char>((nibble(hex[i]) << 4) | nibble(hex[i + 1])));
  }
  SSL* s = const_cast<SSL*>(ssl);  // the key log gets a const SSL; its ex_data is ours
  delete static_cast<Slot*>(SSL_get_ex_data(s, slot_index()));
  SSL_set_ex_data(s, slot_index(), slot.release());
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

void configure_tls_records(SSL_CTX* ctx) {
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384") != 1 ||
      SSL_CTX_set_num_tickets(ctx, 0) != 1) {
    fail("configuring the TLS context");
  }
  (void)slot_index();
  SSL_CTX_set_keylog_callback(ctx, key_log);
}

TlsSender* TlsSender::of(SSL* ssl) {
  auto* slot = static_cast<Slot*>(SSL_get_ex_data(ssl, slot_index()));
  if (slot == nullptr || SSL_is_init_finished(ssl) != 1 || SSL_version(ssl) != TLS1_3_VERSION) {
    return nullptr;
  }
  if (!slot->sender) slot->sender = std::make_unique<TlsSender>(slot->secret, ssl);
  return slot->sender.get();
}

TlsSender::TlsSender(const std::string& secret, const SSL* ssl) {
  const SSL_CIPHER* suite = SSL_get_current_cipher(ssl);
  const std::uint32_t id = suite != nullptr ? SSL_CIPHER_get_id(suite) : 0;
  const bool aes128 = id == TLS1_3_CK_AES_128_GCM_SHA256;
  if (!aes128 && id != TLS1_3_CK_AES_256_GCM_SHA384) fail("a suite other than AES-GCM");
  const char* digest = aes128 ? "SHA256" : "SHA384";
  const std::string key = expand_label(secret, "key", aes128 ? 16 : 32, digest);
  const std::string iv = expand_label(secret, "iv", sizeof iv_, digest);
  std::memcpy(iv_, iv.data(), sizeof iv_);
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  if (ctx == nullptr) fail("making a cipher context");
  cipher_ = ctx;
  if (EVP_EncryptInit_ex(ctx, aes128 ? EVP_aes_128_gcm() : EVP_aes_256_gcm(), nullptr,
                         reinterpret_cast<const unsigned char*>(key.data()), nullptr) != 1) {
    fail("keying AES-GCM");
  }
}

TlsSender::~TlsSender() {
  EVP_CIPHER_CTX_free(static_cast<EVP_CIPHER_CTX*>(cipher_));
}

std::size_t TlsSender::overhead(std::size_t n) {
  const std::size_t records = std::max<std::size_t>(1, (n + kMaxPlain - 1) / kMaxPlain);
  return records * (5 + 1 + kTag);
}

void TlsSender::seal(std::span<const std::span<const std::byte>> pieces, std::size_t from,
                     std::size_t n, std::string& out) {
  auto* ctx = static_cast<EVP_CIPHER_CTX*>(cipher_);
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
    const unsigned char header[5] = {kApplicationData, 3, 3,
                                     static_cast<unsigned char>(length >> 8),
                                     static_cast<unsigned char>(length & 0xff)};
    unsigned char nonce[sizeof iv_];
    std::memcpy(nonce, iv_, sizeof nonce);
    for (std::size_t i = 0; i < 8; ++i) {
      nonce[sizeof nonce - 1 - i] ^= static_cast<unsigned char>(seq_ >> (8 * i));
    }
    int written = 0;
    if (EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce) != 1 ||
        EVP_EncryptUpdate(ctx, nullptr, &written, header, sizeof header) != 1) {
      fail("starting a record");
    }
    out.append(reinterpret_cast<const char*>(header), sizeof header);
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
    ++seq_;
    n -= plain;
  }
}

}  // namespace baton::net::internal
