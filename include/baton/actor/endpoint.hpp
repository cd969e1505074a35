#pragma once

// Endpoints are declared once per actor class, with no IDL and no macro:
//   static constexpr auto endpoints = baton::endpoints<&Trainer::train, &Trainer::eval>();
// On the wire an endpoint is a 64-bit id (a hash of its qualified name, "Trainer::train"),
// and its arguments and result are bytes; the templates here only encode and decode.

#include <array>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "baton/actor/errors.hpp"
#include "baton/actor/task.hpp"
#include "baton/wire/archive.hpp"

namespace baton {

class Actor;

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

/// What a handler produced: a reply body now, or a task that will produce it.
struct HandlerResult {
  Body body;
  Task<Body> task;
};

using EndpointFn = HandlerResult (*)(Actor& self, const Body& args);

struct EndpointInfo {
  std::uint64_t id = 0;
  std::string_view name;
  EndpointFn fn = nullptr;
};

template <class U>
Task<Body> encode_task(Task<U> t) {
  if constexpr (std::is_void_v<U>) {
    co_await std::move(t);
    co_return Body{};
  } else {
    co_return encode(co_await std::move(t));
  }
}

template <auto F>
HandlerResult invoke_endpoint(Actor& self, const Body& body) {
  using T = member_fn<decltype(F)>;
  using R = typename T::ret;
  auto& obj = static_cast<typename T::cls&>(self);
  auto args = [&] {
    if constexpr (T::arity == 0) {
      if (!body.head.empty()) throw DecodeError("arguments sent to an endpoint that takes none");
      return std::tuple<>{};
    } else {
      return decode<typename T::args>(body);
    }
  }();
  auto invoke = [&]() -> R {
    return std::apply([&](auto&... a) -> R { return (obj.*F)(std::move(a)...); }, args);
  };
  if constexpr (is_task<R>::value) {
    return HandlerResult{{}, encode_task(invoke())};
  } else if constexpr (std::is_void_v<R>) {
    invoke();
    return {};
  } else {
    return HandlerResult{encode(invoke()), {}};
  }
}

template <class E>
struct endpoint_table;
template <auto... Fs>
struct endpoint_table<Endpoints<Fs...>> {
  static constexpr std::array<EndpointInfo, sizeof...(Fs)> make() {
    return {EndpointInfo{fnv1a(function_name<Fs>()), function_name<Fs>(), &invoke_endpoint<Fs>}...};
  }
  /// The index of member function `f` in the list, or -1.
  template <class F>
  static int index_of(F f) {
    static_assert((std::is_same_v<F, decltype(Fs)> || ...),
                  "this member function is not listed in the actor's `endpoints`");
    int index = -1;
    int i = 0;
    (void)((([&] {
              if constexpr (std::is_same_v<F, decltype(Fs)>) {
                if (f == Fs) index = i;
              }
              ++i;
            }()),
            ...));
    return index;
  }
};

template <class A>
using endpoints_of = std::remove_cvref_t<decltype(A::endpoints)>;

/// The endpoint table of actor class A (built once).
template <class A>
const auto& endpoint_infos() {
  static constexpr auto table = endpoint_table<endpoints_of<A>>::make();
  return table;
}

/// The wire id of member function `f` of A; throws UsageError if it is not an endpoint.
template <class A, class F>
const EndpointInfo& endpoint_for(F f) {
  const int i = endpoint_table<endpoints_of<A>>::index_of(f);
  if (i < 0) {
    throw UsageError("this member function of " + std::string(type_name<A>()) +
                     " is not listed in its `endpoints`; add it to `static constexpr auto "
                     "endpoints = baton::endpoints<...>()`");
  }
  return endpoint_infos<A>()[static_cast<std::size_t>(i)];
}

/// Encodes call arguments as the endpoint's parameter types, so `f(0)` on `f(double)` works.
template <class F, class... Args>
Body encode_call_args(Args&&... args) {
  using P = typename member_fn<F>::args;
  static_assert(sizeof...(Args) == std::tuple_size_v<P>,
                "wrong number of arguments for this endpoint");
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return encode(static_cast<const std::tuple_element_t<I, P>&>(
        std::tuple_element_t<I, P>(std::forward<Args>(args)))...);
  }
  (std::index_sequence_for<Args...>{});
}

}  // namespace detail
}  // namespace baton
