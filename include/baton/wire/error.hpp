#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace baton {

/// Malformed or over-limit bytes from a peer; the link that carried them is closed.
class DecodeError : public std::runtime_error {
 public:
  explicit DecodeError(const std::string& what) : std::runtime_error("decode error: " + what) {}
};

/// A message too large to travel: too many parts, headers or bytes for the link's limits.
/// Derives from std::length_error, which the runtime threw before it had a type of its own.
class MessageTooLargeError : public std::length_error {
 public:
  using std::length_error::length_error;
};

/// A malformed id or address written by a user or a config file.
class ParseError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace detail {
/// Text fit for an error message: bytes outside printable ASCII as \xNN, long text cut.
std::string printable(std::string_view text);
}  // namespace detail

}  // namespace baton
