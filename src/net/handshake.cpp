#include "net/handshake.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>
#include <stdexcept>

namespace baton::net::auth {
namespace {

using Mac = std::array<std::uint8_t, kMac>;

/// HMAC-SHA256(secret, label || a || b) over two nonces.
Mac mac(const std::string& secret, std::string_view label, const std::uint8_t* a,
        const std::uint8_t* b) {
  std::string msg(label);
  msg.append(reinterpret_cast<const char*>(a), kNonce);  // NOLINT: bytes as chars
  msg.append(reinterpret_cast<const char*>(b), kNonce);  // NOLINT
  Mac out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out.data(), &len);  // NOLINT
  return out;
}

std::string wrong_size(const char* what, std::size_t got, std::size_t want) {
  return std::string("a handshake ") + what + " of " + std::to_string(got) + " bytes (expected " +
         std::to_string(want) + ")";
}

}  // namespace

void random_bytes(std::uint8_t* out, std::size_t n) {
  if (RAND_bytes(out, static_cast<int>(n)) != 1) {
    throw std::runtime_error("OpenSSL's RAND_bytes failed: no randomness for authentication");
  }
}

Challenge make_challenge() {
  Challenge c{};
  std::memcpy(c.data(), kMagic.data(), kMagic.size());
  random_bytes(c.data() + kMagic.size(), kNonce);
  return c;
}

std::string answer_challenge(Bytes challenge, const std::string& secret, Answer& answer) {
  if (challenge.size() != kChallengeSize) {
    return wrong_size("challenge", challenge.size(), kChallengeSize);
  }
  if (std::memcmp(challenge.data(), kMagic.data(), kMagic.size()) != 0) {
    return "the peer did not open with baton's authentication (not a baton proc, or one "
           "without a job secret)";
  }
  random_bytes(answer.data(), kNonce);
  const Mac m = mac(secret, "dial", challenge.data() + kMagic.size(), answer.data());
  std::memcpy(answer.data() + kNonce, m.data(), kMac);
  return {};
}

std::string check_answer(Bytes challenge, Bytes answer, const std::string& secret, Proof& proof) {
  if (challenge.size() != kChallengeSize) {
    return wrong_size("challenge", challenge.size(), kChallengeSize);
  }
  if (answer.size() != kAnswerSize) return wrong_size("answer", answer.size(), kAnswerSize);
  const std::uint8_t* ours = challenge.data() + kMagic.size();
  const Mac expected = mac(secret, "dial", ours, answer.data());
  if (CRYPTO_memcmp(expected.data(), answer.data() + kNonce, kMac) != 0) {
    return "the peer failed authentication: it does not hold this job's secret (or skipped the "
           "handshake)";
  }
  const Mac m = mac(secret, "accept", answer.data(), ours);
  std::memcpy(proof.data(), m.data(), kMac);
  return {};
}

std::string check_proof(Bytes challenge, Bytes answer, Bytes proof, const std::string& secret) {
  if (challenge.size() != kChallengeSize) {
    return wrong_size("challenge", challenge.size(), kChallengeSize);
  }
  if (answer.size() != kAnswerSize) return wrong_size("answer", answer.size(), kAnswerSize);
  if (proof.size() != kProofSize) return wrong_size("proof", proof.size(), kProofSize);
  const Mac expected = mac(secret, "accept", answer.data(), challenge.data() + kMagic.size());
  if (CRYPTO_memcmp(expected.data(), proof.data(), kMac) != 0) {
    return "the peer failed authentication: it does not hold this job's secret";
  }
  return {};
}

}  // namespace baton::net::auth
