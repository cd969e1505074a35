#pragma once

// What the translation units of the `_baton` module share: futures for Python, and values of
// the runtime carried through pickles as their wire form.

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "baton/wire/archive.hpp"
#include "python/py_actor.hpp"

namespace baton::python {

/// The Python debugger's hook for the admin API, and baton._baton.BlockingRegion (debug.py.cpp).
void init_debug(py::module_& m);

/// Whether this is Python's main thread, where Ctrl-C raises KeyboardInterrupt.
bool on_main_thread();

/// Waits through `wait_for(slice, last)` (true once done; `last` marks the slice that ends at
/// the deadline) for up to `seconds` (nullopt: for ever), with the GIL released while it waits.
/// On Python's main thread it waits in short slices and runs Python's signal handlers between
/// them, so that Ctrl-C raises KeyboardInterrupt there. GIL held on entry and on return; false
/// once the time is up.
template <class WaitFor>
bool wait_interruptibly(WaitFor&& wait_for, std::optional<double> seconds) {
  using Clock = std::chrono::steady_clock;
  using std::chrono::milliseconds;
  constexpr milliseconds kSlice(50);
  constexpr milliseconds kForever = std::chrono::hours(24);
  const bool main = on_main_thread();
  const auto deadline =
      seconds ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(std::max(*seconds, 0.0)))
              : Clock::time_point::max();
  for (;;) {
    milliseconds left = kForever;
    if (seconds) {
      left = std::max(milliseconds(0), std::chrono::ceil<milliseconds>(deadline - Clock::now()));
    }
    const milliseconds step = main ? std::min(left, kSlice) : left;
    const bool last = seconds.has_value() && step == left;
    bool done = false;
    {
      py::gil_scoped_release unlocked;
      done = wait_for(step, last);
    }
    if (done) return true;
    if (last) return false;
    if (main && PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

/// wait_interruptibly for a receiver whose `take(slice)` throws TimeoutError when nothing came
/// within the slice: the TimeoutError of the slice that ends at the deadline (in the
/// receiver's own words) goes to the caller.
template <class Take>
void take_interruptibly(Take&& take, std::optional<double> seconds) {
  wait_interruptibly(
      [&](std::chrono::milliseconds step, bool last) {
        try {
          take(step);
          return true;
        } catch (const TimeoutError&) {
          if (last) throw;
          return false;
        }
      },
      seconds);
}

/// A future of any type, its value converted for Python once it is there.
class PyFuture {
 public:
  virtual ~PyFuture() = default;
  virtual detail::StateBase& state() = 0;
  /// The value (GIL held; the future is ready); raises its failure.
  virtual py::object value() = 0;

  bool ready() { return state().ready(); }
  /// Waits up to `seconds` (for ever: None) with the GIL released; whether it is ready.
  bool wait(std::optional<double> seconds) {
    if (ready()) return true;
    // A Python actor's plain endpoint may block, as in Monarch; anywhere else inside an actor
    // (an async endpoint's steps on the event loop) F-2 holds: await instead.
    const Blocking blocking("Future.get()");
    return wait_interruptibly(
        [&](std::chrono::milliseconds step, bool) { return state().wait_for(step); }, seconds);
  }
};

template <class T, class Convert>
class FutureOf : public PyFuture {
 public:
  FutureOf(Future<T> f, Convert c) : f_(std::move(f)), convert_(std::move(c)) {}
  detail::StateBase& state() override { return *f_.state(); }
  py::object value() override {
    // Ready (wait() said so, or the loop was woken): no wait, so allowed in an actor's steps.
    if constexpr (std::is_void_v<T>) {
      f_.state()->value();
      return py::none();
    } else {
      return convert_(f_.state()->value());
    }
  }

 private:
  Future<T> f_;
  Convert convert_;
};

template <class T, class Convert>
std::shared_ptr<PyFuture> wrap(Future<T> f, Convert c) {
  return std::make_shared<FutureOf<T, Convert>>(std::move(f), std::move(c));
}
inline std::shared_ptr<PyFuture> wrap(Future<void> f) {
  return wrap(std::move(f), [] { return py::none(); });
}

/// Releases `held` (with what it holds) once `future` completes.
inline void hold_until(const std::shared_ptr<PyFuture>& future, std::shared_ptr<const void> held) {
  future->state().on_ready([held = std::move(held)]() mutable { held.reset(); });
}

/// A value of the runtime (a mesh, a buffer's handle) as (head, [parts]) of bytes, to pickle.
template <class T>
py::tuple to_wire(const T& value) {
  const Body b = encode(value);
  py::list parts;
  for (const auto& p : b.parts) parts.append(py::bytes(std::string(p.str())));
  return py::make_tuple(py::bytes(b.head), parts);
}
template <class T>
T from_wire(const std::string& head, const std::vector<std::string>& parts) {
  Body b;
  b.head = head;
  for (const auto& p : parts) b.parts.push_back(Bytes::copy(p));
  return decode<T>(b);
}

/// {dim, begin, end, index}: index selects one coordinate and drops the dimension.
using Select = std::tuple<std::string, std::size_t, std::size_t, bool>;

inline std::vector<DimSelect> selects(const std::vector<Select>& in) {
  std::vector<DimSelect> out;
  for (const auto& [dim, begin, end, index] : in) {
    if (index) {
      out.emplace_back(dim, begin);
    } else {
      out.emplace_back(dim, DimSelect::Range{begin, end});
    }
  }
  return out;
}

inline py::tuple point(const Point& p) {
  return py::make_tuple(p.labels, p.coords, p.rank);
}

/// (labels, sizes) of a shape.
inline py::tuple shape(const Shape& s) {
  std::vector<std::size_t> sizes;
  for (const auto& l : s.labels()) sizes.push_back(s.size(l));
  return py::make_tuple(s.labels(), sizes);
}

using Mesh = ActorMesh<PyActor>;
/// A proc mesh's dimensions, as Python gives them: [(name, size), ...].
using Dims = std::vector<std::pair<std::string, std::size_t>>;

/// The collectives' classes and functions (collective.py.cpp).
void bind_collectives(py::module_& m);
/// C++ actors exposed by name (exposed.py.cpp).
void bind_exposed(py::module_& m);
/// The tensor store (store.py.cpp).
void bind_store(py::module_& m);
/// Host meshes and the jobs that give them (job.py.cpp).
void bind_jobs(py::module_& m);
/// The Runtime of a _baton.Runtime object (the controller's); throws UsageError once closed.
Runtime& runtime_of(const py::object& rt);

}  // namespace baton::python
