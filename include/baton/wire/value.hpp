#pragma once

// A dynamically typed value: what a language without C++'s types (Python) sends to an actor
// exposed by name (baton/python/expose.hpp), and gets back. None, a bool, a 64-bit integer, a
// double, a string, bytes, a list, or a dict with string keys (in order).

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "baton/wire/bytes.hpp"
#include "baton/wire/error.hpp"

namespace baton {

struct Value {
  using List = std::vector<Value>;
  using Dict = std::vector<std::pair<std::string, Value>>;
  std::variant<std::monostate, bool, std::int64_t, double, std::string, Bytes, List, Dict> v;

  bool is_none() const { return std::holds_alternative<std::monostate>(v); }
  /// The name of what it holds, for errors ("int", "list", ...).
  const char* kind() const {
    static constexpr const char* names[] = {"None", "bool",  "int",  "float",
                                            "str",  "bytes", "list", "dict"};
    return names[v.index()];
  }

  /// Values nest at most this deep (a hostile peer's nesting is refused, not followed).
  static constexpr int kMaxDepth = 64;

  template <class Ar>
  void save(Ar& ar) const {
    const auto tag = static_cast<std::uint8_t>(v.index());
    ar(tag);
    std::visit(
        [&](const auto& x) {
          if constexpr (!std::is_same_v<std::decay_t<decltype(x)>, std::monostate>) ar(x);
        },
        v);
  }
  template <class Ar>
  void load(Ar& ar) {
    static thread_local int depth = 0;
    struct Deeper {
      Deeper() {
        if (++depth > kMaxDepth) {
          --depth;
          throw DecodeError("a value nested deeper than " + std::to_string(kMaxDepth));
        }
      }
      ~Deeper() { --depth; }
      Deeper(const Deeper&) = delete;
      Deeper& operator=(const Deeper&) = delete;
    } deeper;
    std::uint8_t tag = 0;
    ar(tag);
    switch (tag) {
      case 0:
        v = std::monostate{};
        return;
      case 1:
        load_as<bool>(ar);
        return;
      case 2:
        load_as<std::int64_t>(ar);
        return;
      case 3:
        load_as<double>(ar);
        return;
      case 4:
        load_as<std::string>(ar);
        return;
      case 5:
        load_as<Bytes>(ar);
        return;
      case 6:
        load_as<List>(ar);
        return;
      case 7:
        load_as<Dict>(ar);
        return;
      default:
        throw DecodeError("invalid value tag " + std::to_string(tag));
    }
  }

 private:
  template <class T, class Ar>
  void load_as(Ar& ar) {
    T x{};
    ar(x);
    v = std::move(x);
  }
};

}  // namespace baton
