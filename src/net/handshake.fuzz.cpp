// libFuzzer target for the authentication handshake's messages (handshake.hpp). Any bytes, of
// any length, in the place of a challenge, an answer or a proof are checked without crashing,
// and:
//   - a challenge is answered only if it has the right size and starts with the magic;
//   - no answer but the genuine one passes check_answer against a fresh challenge, and no proof
//     but the genuine one passes check_proof (forging either is forging HMAC-SHA256);
//   - with the input as the secret, a genuine exchange always succeeds.
//
// The first byte picks the message the rest stands for: 0 challenge, 1 answer, 2 proof.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "net/handshake.hpp"

namespace {

using namespace baton::net::auth;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "handshake fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const Bytes rest(data + 1, size - 1);
  const std::string secret(reinterpret_cast<const char*>(data), size);  // NOLINT
  Challenge challenge = make_challenge();
  Answer answer{};
  Proof proof{};
  if (!answer_challenge(challenge, secret, answer).empty()) fail("a genuine challenge refused");
  if (!check_answer(challenge, answer, secret, proof).empty()) fail("a genuine answer refused");
  if (!check_proof(challenge, answer, proof, secret).empty()) fail("a genuine proof refused");

  switch (data[0] % 3) {
    case 0: {
      Answer out{};
      const bool answered = answer_challenge(rest, secret, out).empty();
      const bool well_formed = rest.size() == kChallengeSize &&
                               std::memcmp(rest.data(), kMagic.data(), kMagic.size()) == 0;
      if (answered != well_formed) fail("a challenge's fate does not follow its form");
      break;
    }
    case 1: {
      Proof out{};
      const bool genuine = rest.size() == answer.size() &&
                           std::memcmp(rest.data(), answer.data(), answer.size()) == 0;
      if (check_answer(challenge, rest, secret, out).empty() != genuine) {
        fail("a forged answer was accepted");
      }
      break;
    }
    default: {
      const bool genuine =
          rest.size() == proof.size() && std::memcmp(rest.data(), proof.data(), proof.size()) == 0;
      if (check_proof(challenge, answer, rest, secret).empty() != genuine) {
        fail("a forged proof was accepted");
      }
      break;
    }
  }
  return 0;
}
