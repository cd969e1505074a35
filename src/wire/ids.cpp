#include "baton/wire/ids.hpp"

#include <charconv>

#include "baton/wire/error.hpp"

namespace baton {
namespace {

constexpr std::size_t kMaxNameLength = 128;

using detail::printable;

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

void require_name(std::string_view name, std::string_view what, std::string_view text) {
  if (!is_valid_name(name)) {
    throw ParseError("invalid " + std::string(what) + " name '" + printable(name) + "' in '" +
                     printable(text) + "': use 1-128 characters of [A-Za-z0-9_.-]");
  }
}

std::uint64_t parse_number(std::string_view digits, std::string_view what, std::string_view text) {
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) {
    throw ParseError("invalid " + std::string(what) + " '" + printable(digits) + "' in '" +
                     printable(text) + "': expected a decimal number");
  }
  return v;
}

}  // namespace

bool is_valid_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  for (char c : name) {
    if (!name_char(c)) return false;
  }
  return true;
}

void check_decoded_name(std::string_view name) {
  if (!is_valid_name(name)) throw DecodeError("invalid name in an id");
}

ProcId ProcId::parse(std::string_view text) {
  require_name(text, "proc", text);
  return ProcId{std::string(text)};
}

std::string ActorId::to_string() const {
  return proc.name + "/" + name + "[" + std::to_string(index) + "]";
}

ActorId ActorId::parse(std::string_view text) {
  const auto slash = text.find('/');
  if (slash == std::string_view::npos) {
    throw ParseError("invalid actor id '" + printable(text) +
                     "': expected proc/name[index], e.g. trainers.3/trainer[0]");
  }
  const auto open = text.find('[', slash);
  if (open == std::string_view::npos || text.back() != ']') {
    throw ParseError("invalid actor id '" + printable(text) +
                     "': expected proc/name[index], e.g. trainers.3/trainer[0]");
  }
  ActorId id;
  id.proc = ProcId{std::string(text.substr(0, slash))};
  require_name(id.proc.name, "proc", text);
  id.name = std::string(text.substr(slash + 1, open - slash - 1));
  require_name(id.name, "actor", text);
  id.index = parse_number(text.substr(open + 1, text.size() - open - 2), "actor index", text);
  return id;
}

std::string PortId::to_string() const {
  return actor.to_string() + "#" + std::to_string(port);
}

PortId PortId::parse(std::string_view text) {
  const auto hash = text.rfind('#');
  if (hash == std::string_view::npos) {
    throw ParseError("invalid port id '" + printable(text) +
                     "': expected proc/name[index]#port, e.g. ctl/client[0]#7");
  }
  return PortId{ActorId::parse(text.substr(0, hash)),
                parse_number(text.substr(hash + 1), "port number", text)};
}

namespace detail {

// The user's text for an error message: bytes outside printable ASCII (a NUL would end what())
// are written as \xNN, and a very long text is cut.
std::string printable(std::string_view text) {
  constexpr std::size_t kMaxShown = 300;
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (text.size() > kMaxShown) out += "...";
  return out;
}

}  // namespace detail
}  // namespace baton
