#include "baton/wire/ids.hpp"

#include <charconv>

#include "baton/wire/error.hpp"

namespace baton {
namespace {

constexpr std::size_t kMaxNameLength = 128;

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

void require_name(std::string_view name, std::string_view what, std::string_view text) {
  if (!is_valid_name(name)) {
    throw ParseError("invalid " + std::string(what) + " name '" + std::string(name) + "' in '" +
                     std::string(text) + "': use 1-128 characters of [A-Za-z0-9_.-]");
  }
}

std::uint64_t parse_number(std::string_view digits, std::string_view what, std::string_view text) {
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) {
    throw ParseError("invalid " + std::string(what) + " '" + std::string(digits) + "' in '" +
                     std::string(text) + "': expected a decimal number");
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
    throw ParseError("invalid actor id '" + std::string(text) +
                     "': expected proc/name[index], e.g. trainers.3/trainer[0]");
  }
  const auto open = text.find('[', slash);
  if (open == std::string_view::npos || text.back() != ']') {
    throw ParseError("invalid actor id '" + std::string(text) +
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
    throw ParseError("invalid port id '" + std::string(text) +
                     "': expected proc/name[index]#port, e.g. ctl/client[0]#7");
  }
  return PortId{ActorId::parse(text.substr(0, hash)),
                parse_number(text.substr(hash + 1), "port number", text)};
}

}  // namespace baton
