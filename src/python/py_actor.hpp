#pragma once

// Python actors: one C++ actor type, PyActor, holds an instance of the user's Python class and
// runs its endpoints by name. What travels is a pickle (Pickled) whose big buffers are parts of
// their own, never copied into it. Internal to the `_baton` extension module.

#include <pybind11/pybind11.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actor/current.hpp"
#include "baton/host/runtime.hpp"
#include "baton/mesh/mesh.hpp"

namespace baton::python {

namespace py = pybind11;

/// A pickled Python value: the pickle, and its out-of-band buffers (pickle protocol 5).
struct Pickled {
  Bytes data;
  std::vector<Bytes> buffers;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(data, buffers);
  }
};

/// Owns `info` (a Python buffer held open) and releases it with the GIL held, whichever thread
/// drops the last reference; the interpreter gone, nothing is released.
std::shared_ptr<const void> keep(py::buffer_info* info);
/// The same for any Python object.
std::shared_ptr<const void> keep_object(py::object o);

/// (data, [buffers]) from Python, as baton_pickle.dumps makes it: the buffers are not copied
/// (each keeps its Python object alive until the bytes are sent). GIL held.
Pickled to_pickled(py::handle data_and_buffers);
/// (data, [buffers]) for Python, as views of the received bytes (read-only). GIL held.
py::tuple from_pickled(const Pickled& p);

/// The GIL, taken by one of the runtime's threads. Its Python thread state is made the first
/// time and kept for the thread's life, so that a message's path pays for the lock alone, not for
/// a thread state made and destroyed each time (pybind11's default for threads Python did not
/// start). It is not freed when the thread ends: that needs the GIL, which a thread ending while
/// another holds the GIL and joins it (a collective group's threads, as the group is dropped)
/// could never get. Threads end rarely (a runtime closing, a group dropped): a few hundred bytes
/// each.
/// The Python stack of every thread that runs Python, by native thread id, each frame as a
/// traceback prints it (the stacks the admin API shows; see detail::set_python_stacks).
std::map<int, std::vector<std::string>> python_stacks();

class Gil {
 public:
  Gil() : kept_(keep_thread_state()), gil_() {}

 private:
  static bool keep_thread_state() {
    thread_local const bool kept = [] {
      py::gil_scoped_acquire made;
      made.inc_ref();  // never back to zero: the state outlives this scope
      return true;
    }();
    return kept;
  }
  bool kept_;
  py::gil_scoped_acquire gil_;
};

/// A fresh contextvars context for one message to a Python actor (its constructor, an endpoint,
/// __supervise__, a reducer), as a thread of its own would have: values one actor sets never
/// reach another actor's messages on the same runtime thread. GIL held.
class FreshContext {
 public:
  FreshContext() : context_(PyContext_New()) {
    if (context_ == nullptr) throw py::error_already_set();
    if (PyContext_Enter(context_) != 0) {
      Py_DECREF(context_);
      throw py::error_already_set();
    }
  }
  FreshContext(const FreshContext&) = delete;
  FreshContext& operator=(const FreshContext&) = delete;
  ~FreshContext() {
    if (PyContext_Exit(context_) != 0) PyErr_Clear();
    Py_DECREF(context_);
  }

 private:
  PyObject* context_;
};

/// A Python function (a, b) -> value, pickled, folding replies along the cast tree: every node
/// (a worker's proc, the controller) runs it with the GIL held.
struct PyReducer {
  std::string fn;  // the pickle: small, so it stays in the reducer's inline state
  Pickled operator()(const Pickled& a, const Pickled& b) const;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(fn);
  }
};

/// While alive, the calling thread runs a Python actor's constructor or plain (not async)
/// endpoint, where a blocking get() is allowed as Monarch allows it: the actor still handles one
/// message at a time, and each wait takes a Blocking so the proc's other actors keep running.
class PlainEndpoint {
 public:
  PlainEndpoint() : previous_(std::exchange(detail::may_block_in_actor(), true)) {}
  ~PlainEndpoint() { detail::may_block_in_actor() = previous_; }
  PlainEndpoint(const PlainEndpoint&) = delete;
  PlainEndpoint& operator=(const PlainEndpoint&) = delete;

 private:
  bool previous_;
};

/// Held around a wait that may block a thread: inside a plain endpoint, the pool running it
/// starts a spare worker if needed meanwhile; anywhere else inside an actor, F-2's refusal
/// (`what` names the call); outside actors, nothing.
class Blocking {
 public:
  explicit Blocking(const char* what) {
    detail::check_may_block(what);
    if (detail::may_block_in_actor()) region_.emplace();
  }

 private:
  std::optional<ThreadPool::BlockingRegion> region_;
};

/// What an async endpoint's steps run as: its actor, on the event loop's thread (while the actor
/// itself waits for the endpoint, one message at a time). enter() returns false once the actor
/// is gone.
class ActingAs {
 public:
  explicit ActingAs(std::weak_ptr<detail::Cell> cell) : cell_(std::move(cell)) {}
  bool enter();
  void exit();

 private:
  std::weak_ptr<detail::Cell> cell_;
  std::shared_ptr<detail::Cell> held_;
  std::optional<detail::ActingFor> acting_;
};

/// An instance of a Python class, made from a pickle of (class, args, kwargs) in this proc.
class PyActor : public Actor {
 public:
  explicit PyActor(const Pickled& spawn);
  ~PyActor() override;
  PyActor(const PyActor&) = delete;
  PyActor& operator=(const PyActor&) = delete;

  /// Calls the endpoint `method` with the pickled (args, kwargs); returns the pickled result.
  /// An exception raised there fails the call with its type, message and traceback.
  Task<Pickled> invoke(std::string method, Pickled args);
  /// The instance's __supervise__(failure), if it has one.
  bool supervise(const MeshFailure& failure) override;
  /// The instance's __cleanup__(None), if it has one.
  void on_stop() override;
  /// The instance's __cleanup__(Exception(reason)), if it has one.
  void on_failure(const std::string& reason) override;

  static constexpr auto endpoints = baton::endpoints<&PyActor::invoke>();

 private:
  /// "Class.method", interned, for whoever looks inside the job (cached by method).
  const std::string* endpoint_name(const std::string& method);

  py::object instance_;
  py::object invoke_;                                         // baton._host.invoke, looked up once
  std::string type_name_;                                     // the class's __qualname__
  std::map<std::string, const std::string*> endpoint_names_;  // its actor's thread alone
};

}  // namespace baton::python
