#pragma once

// Internal: the messages of the authentication handshake (see auth.hpp) and their checks, kept
// apart from the socket code so that a fuzzer can feed them arbitrary bytes.
//
//   acceptor -> dialler   challenge: "BATONAUTH1" || nonce_a
//   dialler  -> acceptor  answer:    nonce_d || HMAC(secret, "dial" || nonce_a || nonce_d)
//   acceptor -> dialler   proof:     HMAC(secret, "accept" || nonce_d || nonce_a)

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace baton::net::auth {

inline constexpr std::string_view kMagic = "BATONAUTH1";
inline constexpr std::size_t kNonce = 32;
inline constexpr std::size_t kMac = 32;
inline constexpr std::size_t kChallengeSize = kMagic.size() + kNonce;
inline constexpr std::size_t kAnswerSize = kNonce + kMac;
inline constexpr std::size_t kProofSize = kMac;

using Bytes = std::span<const std::uint8_t>;
using Challenge = std::array<std::uint8_t, kChallengeSize>;
using Answer = std::array<std::uint8_t, kAnswerSize>;
using Proof = std::array<std::uint8_t, kProofSize>;

/// Fills `out` from OpenSSL's generator; throws if it has no randomness.
void random_bytes(std::uint8_t* out, std::size_t n);

/// Acceptor: a fresh challenge.
Challenge make_challenge();
/// Dialler: checks `challenge` and writes its answer; returns why it is refused, or "".
std::string answer_challenge(Bytes challenge, const std::string& secret, Answer& answer);
/// Acceptor: checks `answer` to its `challenge` and writes its proof; why it is refused, or "".
std::string check_answer(Bytes challenge, Bytes answer, const std::string& secret, Proof& proof);
/// Dialler: checks the acceptor's `proof`; why it is refused, or "".
std::string check_proof(Bytes challenge, Bytes answer, Bytes proof, const std::string& secret);

}  // namespace baton::net::auth
