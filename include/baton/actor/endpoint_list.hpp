#pragma once

// Endpoints are declared once per actor class, with no IDL and no macro:
//   static constexpr auto endpoints = baton::endpoints<&Trainer::train, &Trainer::eval>();
// The list is only member pointers: naming it needs no serialization. Their wire ids and the
// code that decodes arguments and encodes results are in endpoint.hpp, instantiated where an
// actor is spawned or called.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "baton/actor/task.hpp"

namespace baton {

template <auto... Fs>
struct Endpoints {
  static constexpr std::size_t size = sizeof...(Fs);
};

/// The endpoint list of an actor class.
template <auto... Fs>
constexpr Endpoints<Fs...> endpoints() {
  return {};
}

namespace detail {

constexpr std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

constexpr std::string_view extract_after(std::string_view pretty, std::string_view key) {
  const auto start = pretty.find(key) + key.size();
  const auto end = pretty.find_first_of(";]", start);
  return pretty.substr(start, end - start);
}

/// The qualified name of a type, e.g. "Trainer".
template <class T>
constexpr std::string_view type_name() {
  return extract_after(__PRETTY_FUNCTION__, "T = ");
}

/// The qualified name of a member function, e.g. "Trainer::train".
template <auto F>
constexpr std::string_view function_name() {
  std::string_view n = extract_after(__PRETTY_FUNCTION__, "F = ");
  if (!n.empty() && n.front() == '&') n.remove_prefix(1);
  return n;
}

template <class F>
struct member_fn;
template <class C, class R, class... A>
struct member_fn<R (C::*)(A...)> {
  using cls = C;
  using ret = R;
  using args = std::tuple<std::decay_t<A>...>;
  static constexpr std::size_t arity = sizeof...(A);
};
template <class C, class R, class... A>
struct member_fn<R (C::*)(A...) const> : member_fn<R (C::*)(A...)> {};
template <class C, class R, class... A>
struct member_fn<R (C::*)(A...) noexcept> : member_fn<R (C::*)(A...)> {};
template <class C, class R, class... A>
struct member_fn<R (C::*)(A...) const noexcept> : member_fn<R (C::*)(A...)> {};

/// The type a caller receives: T for T and Task<T>.
template <class R>
struct reply_of {
  using type = R;
};
template <class T>
struct reply_of<Task<T>> {
  using type = T;
};
template <class F>
using reply_t = typename reply_of<typename member_fn<F>::ret>::type;

}  // namespace detail
}  // namespace baton
