#pragma once

// Names of procs, actors and ports. Text forms print readably and parse back:
//   proc   "ctl", "trainers.3"
//   actor  "trainers.3/trainer[0]"
//   port   "trainers.3/trainer[0]#7"
// Names use [A-Za-z0-9_.-]; '/', '[', ']' and '#' are separators.

#include <compare>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace baton {

/// True if `name` is a valid proc or actor name (non-empty, [A-Za-z0-9_.-], at most 128 chars).
bool is_valid_name(std::string_view name);
/// Throws DecodeError if a name that came off the wire is not valid.
void check_decoded_name(std::string_view name);

struct ProcId {
  std::string name;

  std::string to_string() const { return name; }
  /// Parses a proc id; throws ParseError with the reason.
  static ProcId parse(std::string_view text);
  auto operator<=>(const ProcId&) const = default;

  template <class Ar>
  void save(Ar& ar) const {
    ar(name);
  }
  template <class Ar>
  void load(Ar& ar) {
    ar(name);
    check_decoded_name(name);
  }
};

struct ActorId {
  ProcId proc;
  std::string name;
  std::uint64_t index = 0;

  std::string to_string() const;
  static ActorId parse(std::string_view text);
  auto operator<=>(const ActorId&) const = default;

  template <class Ar>
  void save(Ar& ar) const {
    ar(proc, name, index);
  }
  template <class Ar>
  void load(Ar& ar) {
    ar(proc, name, index);
    check_decoded_name(name);
  }
};

struct PortId {
  ActorId actor;
  std::uint64_t port = 0;

  std::string to_string() const;
  static PortId parse(std::string_view text);
  auto operator<=>(const PortId&) const = default;

  template <class Ar>
  void serialize(Ar& ar) {
    ar(actor, port);
  }
};

}  // namespace baton

template <>
struct std::hash<baton::ProcId> {
  std::size_t operator()(const baton::ProcId& p) const noexcept {
    return std::hash<std::string>{}(p.name);
  }
};
template <>
struct std::hash<baton::ActorId> {
  std::size_t operator()(const baton::ActorId& a) const noexcept {
    std::size_t h = std::hash<std::string>{}(a.proc.name);
    h = h * 31 + std::hash<std::string>{}(a.name);
    return h * 31 + std::hash<std::uint64_t>{}(a.index);
  }
};
template <>
struct std::hash<baton::PortId> {
  std::size_t operator()(const baton::PortId& p) const noexcept {
    return std::hash<baton::ActorId>{}(p.actor) * 31 + std::hash<std::uint64_t>{}(p.port);
  }
};
