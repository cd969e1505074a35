#pragma once

// ValueMesh<T>: one value per member of a shape, as a call on a mesh gathers them.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "baton/actor/errors.hpp"
#include "baton/actor/future.hpp"
#include "baton/slice/slice.hpp"
#include "baton/slice/sliceable.hpp"

namespace baton {

/// One value per member of a shape, by rank or by Point.
template <class T>
class ValueMesh : public Sliceable<ValueMesh<T>> {
 public:
  ValueMesh() = default;
  ValueMesh(Shape shape, std::vector<T> values)
      : shape_(std::move(shape)), values_(std::move(values)) {}

  const Shape& shape() const { return shape_; }
  std::size_t size() const { return values_.size(); }
  const T& operator[](std::size_t rank) const { return values_.at(rank); }
  const T& at(const Point& p) const { return values_.at(shape_.rank_of(p.coords)); }
  /// The values in rank order. On a temporary they are moved out, so
  /// `for (int v : mesh.call(f).get().values())` is safe.
  const std::vector<T>& values() const& { return values_; }
  std::vector<T> values() && { return std::move(values_); }
  /// (Point, value) pairs in rank order.
  std::vector<std::pair<Point, T>> items() const {
    std::vector<std::pair<Point, T>> out;
    for (std::size_t r = 0; r < values_.size(); ++r) out.emplace_back(shape_.point(r), values_[r]);
    return out;
  }

  template <class Ar>
  void serialize(Ar& ar) {
    ar(shape_, values_);
  }

 private:
  friend class Sliceable<ValueMesh>;  // view()
  /// The values of `sub`, a shape over some of this one's locations.
  ValueMesh view(Shape sub) const {
    std::vector<T> out;
    out.reserve(sub.len());
    for (std::size_t r = 0; r < sub.len(); ++r) {
      out.push_back(values_.at(*shape_.slice().rank_of_location(sub.location(r))));
    }
    return ValueMesh(std::move(sub), std::move(out));
  }

  Shape shape_;
  std::vector<T> values_;
};

/// What a call on a mesh gathers: the endpoint's result, or std::monostate for void.
template <class R>
using mesh_value_t = std::conditional_t<std::is_void_v<R>, std::monostate, R>;

namespace detail {

/// Completes one future when all of `parts` have; the first failure fails it.
template <class R>
Future<ValueMesh<mesh_value_t<R>>> gather(const Shape& shape, std::vector<Future<R>> parts) {
  using V = mesh_value_t<R>;
  struct Gather {
    std::mutex mu;
    std::size_t left;
    std::vector<std::optional<V>> values;
    bool done = false;
    Promise<ValueMesh<V>> promise;
    Shape shape;
  };
  auto g = std::make_shared<Gather>();
  g->left = parts.size();
  g->values.resize(parts.size());
  g->shape = shape;
  auto result = g->promise.get_future();
  if (parts.empty()) g->promise.set_value(ValueMesh<V>(g->shape, {}));
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto state = parts[i].state();
    state->on_ready([g, i, state] {
      std::exception_ptr error;
      std::optional<V> v;
      try {
        if constexpr (std::is_void_v<R>) {
          state->value();
          v.emplace();
        } else {
          v.emplace(state->value());
        }
      } catch (...) {
        error = std::current_exception();
      }
      std::unique_lock lock(g->mu);
      if (g->done) return;
      if (error) {
        g->done = true;
        lock.unlock();
        g->promise.set_exception(error);
        return;
      }
      g->values[i] = std::move(v);
      if (--g->left == 0) {
        g->done = true;
        std::vector<V> out;
        out.reserve(g->values.size());
        for (auto& x : g->values) out.push_back(std::move(*x));
        lock.unlock();
        g->promise.set_value(ValueMesh<V>(g->shape, std::move(out)));
      }
    });
  }
  return result;
}

}  // namespace detail

}  // namespace baton
