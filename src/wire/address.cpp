#include "baton/wire/address.hpp"

#include <charconv>

#include "baton/wire/error.hpp"
#include "baton/wire/ids.hpp"

namespace baton {
namespace {

constexpr std::string_view kForms =
    "expected inproc://NAME, unix:///PATH, unix://@NAME or tcp://HOST:PORT";

using detail::printable;

[[noreturn]] void fail(std::string_view text, std::string_view why) {
  throw ParseError("invalid address '" + printable(text) + "': " + std::string(why) + " (" +
                   std::string(kForms) + ")");
}

bool host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_' || c == ':';
}

}  // namespace

Address Address::parse(std::string_view text) {
  Address a;
  if (text.starts_with("inproc://")) {
    a.transport = Transport::inproc;
    a.host = std::string(text.substr(9));
    if (!is_valid_name(a.host)) fail(text, "the in-process name must be 1-128 of [A-Za-z0-9_.-]");
    return a;
  }
  if (text.starts_with("unix://")) {
    a.transport = Transport::unix_socket;
    a.host = std::string(text.substr(7));
    if (a.host.empty()) fail(text, "the socket path is empty");
    if (a.host[0] != '/' && a.host[0] != '@') {
      fail(text, "the socket path must be absolute or start with @ (abstract namespace)");
    }
    // sockaddr_un holds 108 bytes including the terminator.
    if (a.host.size() > 107) fail(text, "the socket path is longer than 107 bytes");
    if (a.host.find('\0') != std::string::npos) fail(text, "the socket path contains a NUL");
    return a;
  }
  if (text.starts_with("tcp://")) {
    a.transport = Transport::tcp;
    std::string_view rest = text.substr(6);
    std::string_view host;
    std::string_view port;
    if (rest.starts_with("[")) {
      const auto close = rest.find(']');
      if (close == std::string_view::npos) fail(text, "missing ']' after an IPv6 host");
      host = rest.substr(1, close - 1);
      if (close + 1 >= rest.size() || rest[close + 1] != ':') fail(text, "missing ':PORT'");
      port = rest.substr(close + 2);
    } else {
      const auto colon = rest.rfind(':');
      if (colon == std::string_view::npos) fail(text, "missing ':PORT'");
      host = rest.substr(0, colon);
      port = rest.substr(colon + 1);
      if (host.find(':') != std::string_view::npos) fail(text, "put an IPv6 host in brackets");
    }
    if (host.empty() || host.size() > 253) fail(text, "the host is empty or too long");
    for (char c : host) {
      if (!host_char(c)) fail(text, "the host has an invalid character");
    }
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
      fail(text, "the port must be a number from 0 to 65535");
    }
    a.host = std::string(host);
    a.port = static_cast<std::uint16_t>(value);
    return a;
  }
  fail(text, "unknown transport");
}

std::string Address::to_string() const {
  switch (transport) {
    case Transport::inproc:
      return "inproc://" + host;
    case Transport::unix_socket:
      return "unix://" + host;
    case Transport::tcp:
      if (host.find(':') != std::string::npos) {
        return "tcp://[" + host + "]:" + std::to_string(port);
      }
      return "tcp://" + host + ":" + std::to_string(port);
  }
  return "invalid://";
}

}  // namespace baton
