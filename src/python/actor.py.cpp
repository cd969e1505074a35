// PyActor: the worker's side of a Python actor. Every call into Python holds the GIL only while
// Python runs; an `async def` endpoint runs on the process's event loop thread while the actor
// waits for it (co_await), so the actor still handles one message at a time.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "actor/cell.hpp"
#include "actor/current.hpp"
#include "log/log.hpp"
#include "python/py_actor.hpp"

namespace baton::python {
namespace {

py::module_ host() {
  return py::module_::import("baton._host");
}

constexpr int kValue = 0;
constexpr int kPending = 1;
constexpr int kFatal = 3;  // a BaseException that is not an Exception: the actor fails

/// The text of a Python exception raised outside the user's code (the runtime's own helpers).
std::runtime_error internal_error(const py::error_already_set& e) {
  return std::runtime_error(std::string("[py:RuntimeError] baton's Python side failed: ") +
                            e.what());
}

/// The text of an exception the user's code raised, with its traceback, for its caller.
std::string remote_text(const py::error_already_set& e) {
  return host().attr("encode_exception")(e.value(), e.trace()).cast<std::string>();
}

}  // namespace

std::map<int, std::vector<std::string>> python_stacks() {
  std::map<int, std::vector<std::string>> out;
  if (Py_IsInitialized() == 0) return out;
  // A thread state of its own, dropped after: the asking thread is made for one request.
  const py::gil_scoped_acquire gil;
  const py::object format = py::module_::import("traceback").attr("format_stack");
  for (PyThreadState* t = PyInterpreterState_ThreadHead(PyInterpreterState_Get()); t != nullptr;
       t = PyThreadState_Next(t)) {
    PyFrameObject* frame = PyThreadState_GetFrame(t);  // a new reference, or null
    if (frame == nullptr) continue;
    const auto f = py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(frame));
    std::vector<std::string> frames;
    for (const py::handle entry : format(f)) {
      auto text = entry.cast<std::string>();
      const auto first = text.find_first_not_of(' ');
      text.erase(0, first == std::string::npos ? text.size() : first);
      while (!text.empty() && text.back() == '\n') text.pop_back();
      frames.push_back(std::move(text));
    }
    out[static_cast<int>(t->native_thread_id)] = std::move(frames);
  }
  return out;
}

std::shared_ptr<const void> keep(py::buffer_info* info) {
  return std::shared_ptr<const void>(info, [](const void* p) {
    auto* i = static_cast<py::buffer_info*>(const_cast<void*>(p));
    if (Py_IsInitialized() == 0) return;  // the interpreter is gone: nothing to release
    const Gil gil;
    delete i;
  });
}

std::shared_ptr<const void> keep_object(py::object o) {
  return std::shared_ptr<const void>(new py::object(std::move(o)), [](const void* p) {
    auto* held = static_cast<py::object*>(const_cast<void*>(p));
    if (Py_IsInitialized() == 0) {
      (void)held->release();  // the interpreter is gone: nothing to release
      delete held;
      return;
    }
    const Gil gil;
    delete held;
  });
}

Pickled to_pickled(py::handle data_and_buffers) {
  auto t = py::reinterpret_borrow<py::tuple>(data_and_buffers);
  Pickled p;
  const auto data = t[0].cast<std::string_view>();  // a small pickle: copied
  p.data = Bytes::copy(data.data(), data.size());
  for (py::handle b : py::reinterpret_borrow<py::list>(t[1])) {
    auto* info = new py::buffer_info(py::reinterpret_borrow<py::buffer>(b).request());
    const auto* start = static_cast<const std::byte*>(info->ptr);
    const auto size = static_cast<std::size_t>(info->size * info->itemsize);
    p.buffers.push_back(Bytes::view(keep(info), start, size));
  }
  return p;
}

py::tuple from_pickled(const Pickled& p) {
  py::list buffers;
  for (const auto& b : p.buffers) buffers.append(py::cast(b));
  return py::make_tuple(py::cast(p.data), buffers);
}

bool ActingAs::enter() {
  held_ = cell_.lock();
  if (!held_) return false;
  acting_.emplace(held_.get());
  return true;
}

void ActingAs::exit() {
  acting_.reset();
  held_.reset();
}

Pickled PyReducer::operator()(const Pickled& a, const Pickled& b) const {
  const Gil gil;
  try {
    const FreshContext fresh;
    const py::tuple x = from_pickled(a);
    const py::tuple y = from_pickled(b);
    return to_pickled(host().attr("fold")(py::bytes(fn), x[0], x[1], y[0], y[1]));
  } catch (const py::error_already_set& e) {
    throw std::runtime_error(remote_text(e));
  }
}

PyActor::PyActor(const Pickled& spawn) {
  const Gil gil;
  try {
    const FreshContext fresh;
    const PlainEndpoint plain;  // a constructor may block on calls, as a plain endpoint may
    const py::tuple args = from_pickled(spawn);
    const ActorContext& c = context();
    // Its address too: the collectives' join() needs the actor, valid while the instance is.
    py::list sizes;  // of the point's dimensions, in its mesh (None if it has none of them)
    for (const auto& l : c.point.labels) {
      if (c.shape.has(l)) sizes.append(c.shape.size(l));
    }
    const py::tuple where = py::make_tuple(
        c.id.to_string(), c.mesh, c.rank,
        py::make_tuple(c.point.labels, c.point.coords, c.rank,
                       sizes.size() == c.point.labels.size() ? py::object(sizes) : py::none()),
        reinterpret_cast<std::uintptr_t>(this));  // NOLINT
    // Its class's name from the start, so that a constructor that raises is named by it.
    if (detail::Cell* cell = detail::current_cell();
        cell != nullptr && py::hasattr(args[0], "__qualname__")) {
      cell->set_type_name(
          detail::interned_name(py::str(args[0].attr("__qualname__")).cast<std::string>()));
    }
    instance_ = host().attr("construct")(args[0], args[1], where);
    invoke_ = host().attr("invoke");
    // Whoever looks inside the job sees the Python class and its endpoints, not PyActor's.
    type_name_ = py::type::of(instance_).attr("__qualname__").cast<std::string>();
    if (detail::Cell* cell = detail::current_cell()) {
      cell->set_type_name(detail::interned_name(type_name_));
    }
  } catch (const py::error_already_set& e) {
    instance_ = py::object();  // dropped here, with the GIL, not by the unwinding after it
    invoke_ = py::object();
    throw std::runtime_error(remote_text(e));
  }
}

PyActor::~PyActor() {
  if (Py_IsInitialized() == 0) {
    (void)instance_.release();  // the interpreter is gone: nothing to release
    (void)invoke_.release();
    return;
  }
  const Gil gil;
  instance_ = py::object();
  invoke_ = py::object();
}

Task<Pickled> PyActor::invoke(std::string method, Pickled args) {
  std::optional<Future<Pickled>> later;
  Pickled now;
  std::optional<std::string> error;
  bool fatal = false;
  {
    const Gil gil;
    if (detail::Cell* cell = detail::current_cell()) cell->set_running_name(endpoint_name(method));
    try {
      const FreshContext fresh;
      const PlainEndpoint plain;
      const py::tuple in = from_pickled(args);
      const py::tuple r = invoke_(instance_, method, in[0], in[1]);
      const int status = r[0].cast<int>();
      if (status == kValue) {
        now = to_pickled(r[1]);
      } else if (status == kPending) {
        Promise<Pickled> done;
        later = done.get_future();
        auto acting = std::make_shared<ActingAs>(detail::cell_ptr(*detail::current_cell()));
        host().attr("schedule")(r[1], py::cast(acting), instance_,
                                py::cpp_function([done, method](int s, const py::object& v) {
                                  if (s == kValue) {
                                    done.set_value(to_pickled(v));
                                  } else if (s == kFatal) {
                                    done.set_exception(std::make_exception_ptr(
                                        ActorFailure(v.cast<std::string>(), method)));
                                  } else {
                                    done.set_exception(std::make_exception_ptr(
                                        std::runtime_error(v.cast<std::string>())));
                                  }
                                }));
      } else {
        error = r[1].cast<std::string>();
        fatal = status == kFatal;
      }
    } catch (const py::error_already_set& e) {
      error = internal_error(e).what();
    }
  }
  if (error && fatal) throw ActorFailure(*error, method);
  if (error) throw std::runtime_error(*error);
  if (later) co_return co_await *later;
  co_return now;
}

const std::string* PyActor::endpoint_name(const std::string& method) {
  auto [it, fresh] = endpoint_names_.try_emplace(method, nullptr);
  if (fresh) {
    const std::string plain = method.starts_with('*') ? method.substr(1) : method;
    it->second = detail::interned_name(type_name_ + "." + plain);
  }
  return it->second;
}

void PyActor::on_stop() {
  if (Py_IsInitialized() == 0) return;
  const Gil gil;
  if (!instance_) return;
  try {
    const FreshContext fresh;
    const PlainEndpoint plain;  // it may wait for what it releases
    host().attr("cleanup")(instance_, py::none());
  } catch (const py::error_already_set& e) {
    detail::log_error("{}.__cleanup__ raised: {}", id().to_string(), e.what());
  }
}

void PyActor::on_failure(const std::string& reason) {
  if (Py_IsInitialized() == 0) return;
  const Gil gil;
  if (!instance_) return;
  try {
    const FreshContext fresh;
    const PlainEndpoint plain;
    host().attr("cleanup")(instance_, reason);
  } catch (const py::error_already_set& e) {
    detail::log_error("{}.__cleanup__ raised: {}", id().to_string(), e.what());
  }
}

bool PyActor::supervise(const MeshFailure& failure) {
  const Gil gil;
  try {
    const FreshContext fresh;
    return host()
        .attr("supervise")(instance_, failure.to_string(), failure.mesh, failure.rank,
                           failure.actor.to_string())
        .cast<bool>();
  } catch (const py::error_already_set& e) {
    // The actor fails saying what its __supervise__ raised, and that failure climbs to its owner.
    throw std::runtime_error("__supervise__ raised: " + remote_text(e));
  }
}

}  // namespace baton::python
