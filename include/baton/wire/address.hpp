#pragma once

// Where a proc can be reached:
//   inproc://name           the same process
//   unix:///abs/path.sock   a unix-domain socket; unix://@name for the abstract namespace
//   tcp://host:port         TCP; IPv6 hosts in brackets, tcp://[::1]:5000

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

namespace baton {

struct Address {
  enum class Transport : std::uint8_t { inproc, unix_socket, tcp };

  Transport transport = Transport::inproc;
  std::string host;  // inproc name, socket path, or TCP host
  std::uint16_t port = 0;

  /// Parses an address; throws ParseError naming what is wrong and the accepted forms.
  static Address parse(std::string_view text);
  std::string to_string() const;
  auto operator<=>(const Address&) const = default;

  template <class Ar>
  void save(Ar& ar) const {
    ar(to_string());
  }
  template <class Ar>
  void load(Ar& ar);
};

}  // namespace baton

#include "baton/wire/error.hpp"

template <class Ar>
void baton::Address::load(Ar& ar) {
  std::string text;
  ar(text);
  try {
    *this = parse(text);
  } catch (const ParseError& e) {
    throw DecodeError(e.what());
  }
}
