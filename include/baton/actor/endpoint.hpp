#pragma once

// How an endpoint is invoked from bytes and called with values. On the wire an endpoint is a
// 64-bit id (a hash of its qualified name, "Trainer::train"), and its arguments and result are
// bytes; the templates here only encode and decode. The list itself is in endpoint_list.hpp.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "baton/actor/endpoint_list.hpp"
#include "baton/actor/errors.hpp"
#include "baton/actor/task.hpp"
#include "baton/wire/archive.hpp"

namespace baton {

class Actor;

namespace detail {

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

/// While one lives, calls this thread sends to the endpoint `base` go by `name` in the
/// caller's metrics, stall reports and errors, in place of the C++ endpoint's name: for a host
/// language whose endpoints all run through one C++ endpoint (a Python actor's "Class.method").
class EndpointLabel {
 public:
  EndpointLabel(const EndpointInfo& base, std::string_view name);
  ~EndpointLabel();
  EndpointLabel(const EndpointLabel&) = delete;
  EndpointLabel& operator=(const EndpointLabel&) = delete;

 private:
  const EndpointInfo* outer_;
};
/// The endpoint the innermost EndpointLabel of this thread names (kept for the process's life,
/// as a message may point at it), or null.
const EndpointInfo* labelled_endpoint();

/// The wire id of member function `f` of A; throws UsageError if it is not an endpoint.
template <class A, class F>
const EndpointInfo& endpoint_for(F f) {
  const int i = endpoint_table<endpoints_of<A>>::index_of(f);
  if (i < 0) {
    throw UsageError("this member function of " + std::string(type_name<A>()) +
                     " is not listed in its `endpoints`; add it to `static constexpr auto "
                     "endpoints = baton::endpoints<...>()`");
  }
  const EndpointInfo& info = endpoint_infos<A>()[static_cast<std::size_t>(i)];
  if (const EndpointInfo* labelled = labelled_endpoint();
      labelled != nullptr && labelled->fn == info.fn) {
    return *labelled;
  }
  return info;
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
