#include "net/handshake.hpp"

// Nettle, not OpenSSL, for the one HMAC a link's handshake needs: OpenSSL 3 builds its provider
// tables on a process's first HMAC or RAND_bytes (about 1 ms of CPU), which every worker paid on
// its way up. Nonces come from the kernel's generator (getrandom) directly.
#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace baton::net::auth {
namespace {

using Mac = std::array<std::uint8_t, kMac>;

/// HMAC-SHA256(secret, label || a || b) over two nonces.
Mac mac(const std::string& secret, std::string_view label, const std::uint8_t* a,
        const std::uint8_t* b) {
  static_assert(kMac == SHA256_DIGEST_SIZE);
  hmac_sha256_ctx ctx{};
  hmac_sha256_set_key(&ctx, secret.size(),
                      reinterpret_cast<const std::uint8_t*>(secret.data()));  // NOLINT: chars
  hmac_sha256_update(&ctx, label.size(),
                     reinterpret_cast<const std::uint8_t*>(label.data()));  // NOLINT: as bytes
  hmac_sha256_update(&ctx, kNonce, a);
  hmac_sha256_update(&ctx, kNonce, b);
  Mac out{};
  hmac_sha256_digest(&ctx, out.size(), out.data());
  return out;
}

std::string wrong_size(const char* what, std::size_t got, std::size_t want) {
  return std::string("a handshake ") + what + " of " + std::to_string(got) + " bytes (expected " +
         std::to_string(want) + ")";
}

}  // namespace

void random_bytes(std::uint8_t* out, std::size_t n) {
  while (n > 0) {
    const ssize_t got = ::getrandom(out, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(),
                              "getrandom: no randomness for authentication");
    }
    out += got;
    n -= static_cast<std::size_t>(got);
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
  if (nettle_memeql_sec(expected.data(), answer.data() + kNonce, kMac) == 0) {
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
  if (nettle_memeql_sec(expected.data(), proof.data(), kMac) == 0) {
    return "the peer failed authentication: it does not hold this job's secret";
  }
  return {};
}

}  // namespace baton::net::auth
