#pragma once

// C++ actors for Python: expose<A, CtorArgs...>("Name") lets a Python controller (or a Python
// actor) spawn actor A by that name in this program's worker processes and call its endpoints
// by their names, with arguments and results converted to and from Python values. A typed C++
// caller still calls the same actors as usual.
//
//   int main(int argc, char** argv) {
//     baton::expose<Trainer, int>("Trainer");   // before the Runtime: workers serve inside it
//     baton::Runtime rt(argc, argv);
//     ...
//   }
//
//   # Python
//   procs = baton.this_host().spawn_procs({"gpus": 2}, program=["build/bin/trainers"])
//   trainers = procs.spawn("trainers", baton.cpp("Trainer"), 42)
//   trainers.train.call(1).get()
//
// Converted types: bool, integers, float and double, std::string, baton::Bytes (Python bytes),
// std::vector<T> (list), std::map/unordered_map<std::string, T> (dict), std::optional<T>
// (None), std::pair/std::tuple (list), baton::Value itself, and void results (None). A value of
// the wrong kind fails the call with an error naming the argument.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "baton/actor/actor.hpp"
#include "baton/actor/actor_ref.hpp"
#include "baton/actor/endpoint.hpp"
#include "baton/wire/archive.hpp"
#include "baton/wire/value.hpp"

namespace baton {

template <class T>
struct ValueConvert;

/// `x` as a dynamic value.
template <class T>
Value to_value(const T& x) {
  return ValueConvert<T>::to(x);
}
/// `v` as a T; throws std::invalid_argument naming `what` if it is of another kind.
template <class T>
T from_value(const Value& v, const std::string& what) {
  return ValueConvert<T>::from(v, what);
}

namespace detail {
[[noreturn]] inline void wrong_kind(const Value& v, const char* want, const std::string& what) {
  throw std::invalid_argument(what + ": expected " + want + ", got " + v.kind());
}
template <class T>
const T& as(const Value& v, const char* want, const std::string& what) {
  if (const T* x = std::get_if<T>(&v.v)) return *x;
  wrong_kind(v, want, what);
}
}  // namespace detail

template <>
struct ValueConvert<Value> {
  static Value to(const Value& x) { return x; }
  static Value from(const Value& v, const std::string&) { return v; }
};
template <>
struct ValueConvert<bool> {
  static Value to(bool x) { return Value{x}; }
  static bool from(const Value& v, const std::string& what) {
    return detail::as<bool>(v, "bool", what);
  }
};
template <class T>
requires(std::is_integral_v<T> && !std::is_same_v<T, bool>) struct ValueConvert<T> {
  static Value to(T x) { return Value{static_cast<std::int64_t>(x)}; }
  static T from(const Value& v, const std::string& what) {
    const std::int64_t x = detail::as<std::int64_t>(v, "int", what);
    if (!std::in_range<T>(x))
      throw std::invalid_argument(what + ": " + std::to_string(x) + " is out of range");
    return static_cast<T>(x);
  }
};
template <class T>
requires std::is_floating_point_v<T>
struct ValueConvert<T> {
  static Value to(T x) { return Value{static_cast<double>(x)}; }
  static T from(const Value& v, const std::string& what) {
    if (const auto* i = std::get_if<std::int64_t>(&v.v)) return static_cast<T>(*i);
    return static_cast<T>(detail::as<double>(v, "float", what));
  }
};
template <>
struct ValueConvert<std::string> {
  static Value to(const std::string& x) { return Value{x}; }
  static std::string from(const Value& v, const std::string& what) {
    return detail::as<std::string>(v, "str", what);
  }
};
template <>
struct ValueConvert<Bytes> {
  static Value to(const Bytes& x) { return Value{x}; }
  static Bytes from(const Value& v, const std::string& what) {
    return detail::as<Bytes>(v, "bytes", what);
  }
};
template <class T>
struct ValueConvert<std::vector<T>> {
  static Value to(const std::vector<T>& x) {
    Value::List out;
    out.reserve(x.size());
    for (const auto& e : x) out.push_back(to_value(e));
    return Value{std::move(out)};
  }
  static std::vector<T> from(const Value& v, const std::string& what) {
    const auto& list = detail::as<Value::List>(v, "list", what);
    std::vector<T> out;
    out.reserve(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
      out.push_back(from_value<T>(list[i], what + "[" + std::to_string(i) + "]"));
    }
    return out;
  }
};
template <class M>
struct DictConvert {
  using T = typename M::mapped_type;
  static Value to(const M& x) {
    Value::Dict out;
    for (const auto& [k, e] : x) out.emplace_back(k, to_value(e));
    return Value{std::move(out)};
  }
  static M from(const Value& v, const std::string& what) {
    M out;
    for (const auto& [k, e] : detail::as<Value::Dict>(v, "dict", what)) {
      out.emplace(k, from_value<T>(e, what + "['" + k + "']"));
    }
    return out;
  }
};
template <class T>
struct ValueConvert<std::map<std::string, T>> : DictConvert<std::map<std::string, T>> {};
template <class T>
struct ValueConvert<std::unordered_map<std::string, T>>
    : DictConvert<std::unordered_map<std::string, T>> {};
template <class T>
struct ValueConvert<std::optional<T>> {
  static Value to(const std::optional<T>& x) { return x ? to_value(*x) : Value{}; }
  static std::optional<T> from(const Value& v, const std::string& what) {
    if (v.is_none()) return std::nullopt;
    return from_value<T>(v, what);
  }
};
template <class... Ts>
struct ValueConvert<std::tuple<Ts...>> {
  static Value to(const std::tuple<Ts...>& x) {
    return std::apply([](const auto&... e) { return Value{Value::List{to_value(e)...}}; }, x);
  }
  static std::tuple<Ts...> from(const Value& v, const std::string& what) {
    const auto& list = detail::as<Value::List>(v, "list", what);
    if (list.size() != sizeof...(Ts)) {
      throw std::invalid_argument(what + ": expected " + std::to_string(sizeof...(Ts)) +
                                  " items, got " + std::to_string(list.size()));
    }
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::tuple<Ts...>{from_value<Ts>(list[I], what + "[" + std::to_string(I) + "]")...};
    }
    (std::index_sequence_for<Ts...>{});
  }
};
template <class A, class B>
struct ValueConvert<std::pair<A, B>> {
  static Value to(const std::pair<A, B>& x) {
    return ValueConvert<std::tuple<A, B>>::to(std::tuple<A, B>(x.first, x.second));
  }
  static std::pair<A, B> from(const Value& v, const std::string& what) {
    auto [a, b] = ValueConvert<std::tuple<A, B>>::from(v, what);
    return {std::move(a), std::move(b)};
  }
};

/// What a caller that knows an exposed actor by name only (Python) holds: its one endpoint
/// calls any of the actor's endpoints by name. Never spawned itself.
class ExposedCall : public Actor {
 public:
  Task<Value> call(const std::string& endpoint, const std::vector<Value>& args) {
    (void)endpoint;
    (void)args;
    throw std::logic_error("ExposedCall is a name for exposed actors' endpoint, not an actor");
  }
  static constexpr auto endpoints = baton::endpoints<&ExposedCall::call>();
};

namespace detail {

/// The factory key of the actor exposed as `name`.
inline std::string exposed_key(std::string_view name) {
  return "baton.exposed:" + std::string(name);
}

template <class A>
using ExposedFn = Task<Value> (*)(A&, std::vector<Value>);

template <auto F, class A>
Task<Value> exposed_invoke(A& obj, std::vector<Value> args) {
  using M = member_fn<decltype(F)>;
  using P = typename M::args;
  using R = typename M::ret;
  const std::string name(function_name<F>());
  if (args.size() != M::arity) {
    throw std::invalid_argument(name + " takes " + std::to_string(M::arity) + " arguments, got " +
                                std::to_string(args.size()));
  }
  P typed = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return P{from_value<std::tuple_element_t<I, P>>(
        args[I], "argument " + std::to_string(I + 1) + " of " + name)...};
  }
  (std::make_index_sequence<M::arity>{});
  auto run = [&]() -> R {
    return std::apply([&](auto&... a) -> R { return (obj.*F)(std::move(a)...); }, typed);
  };
  if constexpr (is_task<R>::value) {
    using U = typename R::value_type;
    if constexpr (std::is_void_v<U>) {
      co_await run();
      co_return Value{};
    } else {
      co_return to_value(co_await run());
    }
  } else if constexpr (std::is_void_v<R>) {
    run();
    co_return Value{};
  } else {
    co_return to_value(run());
  }
}

/// A's endpoints by their short names ("train" for Trainer::train).
template <class A, auto... Fs>
const std::vector<std::pair<std::string_view, ExposedFn<A>>>& exposed_table(Endpoints<Fs...>) {
  static const std::vector<std::pair<std::string_view, ExposedFn<A>>> table = [] {
    std::vector<std::pair<std::string_view, ExposedFn<A>>> t;
    auto short_name = [](std::string_view n) {
      const auto at = n.rfind("::");
      return at == std::string_view::npos ? n : n.substr(at + 2);
    };
    (t.emplace_back(short_name(function_name<Fs>()), &exposed_invoke<Fs, A>), ...);
    return t;
  }();
  return table;
}

template <class A>
HandlerResult invoke_exposed(Actor& self, const Body& body) {
  auto [endpoint, args] = decode<std::tuple<std::string, std::vector<Value>>>(body);
  const auto& table = exposed_table<A>(endpoints_of<A>{});
  for (const auto& [name, fn] : table) {
    if (name == endpoint)
      return HandlerResult{{}, encode_task(fn(static_cast<A&>(self), std::move(args)))};
  }
  std::string known;
  for (const auto& [name, fn] : table) known += (known.empty() ? "" : ", ") + std::string(name);
  throw std::invalid_argument(std::string(type_name<A>()) + " has no endpoint '" + endpoint +
                              "' (its endpoints: " + known + ")");
}

template <class A, class... C>
std::unique_ptr<Actor> make_exposed(const Body& body) {
  const auto args = decode<std::vector<Value>>(body);
  if (args.size() != sizeof...(C)) {
    throw std::invalid_argument(std::string(type_name<A>()) + "'s constructor takes " +
                                std::to_string(sizeof...(C)) + " arguments, got " +
                                std::to_string(args.size()));
  }
  const std::string of = " of " + std::string(type_name<A>());
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::make_unique<A>(from_value<C>(args[I], "argument " + std::to_string(I + 1) + of)...);
  }
  (std::index_sequence_for<C...>{});
}

/// An exposed type's endpoints: A's own, and ExposedCall's (by name).
struct ExposedType {
  std::vector<EndpointInfo> endpoints;
  ActorTypeInfo info;
};
inline std::deque<ExposedType>& exposed_types() {
  static std::deque<ExposedType> types;  // registered once per process, like factories
  return types;
}
inline std::mutex& exposed_mutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace detail

/// Lets Python spawn A by `name` with constructor arguments of types C..., and call its
/// endpoints by name. Call it in main() before baton::Runtime (a worker serves inside it).
/// Returns the factory's id.
template <class A, class... C>
std::uint64_t expose(std::string_view name) {
  std::lock_guard lock(detail::exposed_mutex());
  auto& t = detail::exposed_types().emplace_back();
  const auto& own = detail::endpoint_infos<A>();
  t.endpoints.assign(own.begin(), own.end());
  detail::EndpointInfo by_name = detail::endpoint_infos<ExposedCall>()[0];
  by_name.fn = &detail::invoke_exposed<A>;
  t.endpoints.push_back(by_name);
  t.info = detail::ActorTypeInfo{detail::type_name<A>(), t.endpoints.data(), t.endpoints.size()};
  return detail::register_factory(detail::exposed_key(name), &detail::make_exposed<A, C...>,
                                  &t.info);
}

}  // namespace baton
