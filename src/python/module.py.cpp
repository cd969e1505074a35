// The `_baton` extension module: the runtime, host/proc/actor meshes of Python actors, futures
// and streams, over the same C++ runtime. The Python package `baton` wraps it; nothing here is
// meant to be called by users directly. Every call that can block releases the GIL.

#include <pthread.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "actor/directory.hpp"
#include "actor/stacks.hpp"
#include "baton/launch/job.hpp"
#include "baton/rdma/rdma.hpp"
#include "baton/store/store.hpp"
#include "host/runtime_impl.hpp"
#include "log/log.hpp"
#include "python/bindings.hpp"

namespace baton::python {
namespace {

/// While one lives, the Python actor calls this thread sends go by `label` ("Class.method") in
/// this process's metrics, stall reports and errors, not by the C++ endpoint that runs them all.
class Labelled {
 public:
  explicit Labelled(const std::string& label) {
    if (!label.empty()) label_.emplace(detail::endpoint_for<PyActor>(&PyActor::invoke), label);
  }

 private:
  std::optional<detail::EndpointLabel> label_;
};

/// A verb of a Python actor mesh, as bound: (mesh, method, args, label), sent by `label`.
template <class F>
auto verb(F f) {
  return [f](const Mesh& a, const std::string& method, py::handle args, const std::string& label) {
    const Labelled named(label);
    return f(a, method, to_pickled(args));
  };
}

/// A call's one reply, as a Python value.
py::object one_value(const Pickled& p) {
  return from_pickled(p);
}

/// Tells an asyncio loop that futures are ready: it watches `fd` (readable once one is) and
/// takes the tokens of the ready ones with drain(). No thread per future, no thread per loop.
class Notifier : public std::enable_shared_from_this<Notifier> {
 public:
  Notifier() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (fd_ < 0) throw std::runtime_error("eventfd failed");
  }
  ~Notifier() { ::close(fd_); }
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;
  int fd() const { return fd_; }
  void watch(PyFuture& f, std::int64_t token) {
    f.state().on_ready([self = shared_from_this(), token] {
      {
        std::lock_guard lock(self->mu_);
        self->ready_.push_back(token);
      }
      const std::uint64_t one = 1;
      (void)!::write(self->fd_, &one, sizeof one);
    });
  }
  std::vector<std::int64_t> drain() {
    std::uint64_t n = 0;
    (void)!::read(fd_, &n, sizeof n);
    std::lock_guard lock(mu_);
    return std::exchange(ready_, {});
  }

 private:
  int fd_;
  std::mutex mu_;
  std::vector<std::int64_t> ready_;
};

/// Replies of a stream, one per member: (point, value) or None once every member answered.
class PyStream {
 public:
  explicit PyStream(MeshStream<Pickled> s) : s_(std::move(s)) {}
  py::object next(std::optional<double> seconds) {
    std::optional<std::pair<Point, Pickled>> item;
    const Blocking blocking("Stream.next()");
    take_interruptibly([&](std::chrono::milliseconds step) { item = s_.next(step); }, seconds);
    if (!item) return py::none();
    return py::make_tuple(point(item->first), from_pickled(item->second));
  }

 private:
  MeshStream<Pickled> s_;
};

/// `transfer(pointer, size)` (a transfer's future) on the memory of `b`, which stays held open
/// (writable, if asked) until the transfer is over.
template <class F>
std::shared_ptr<PyFuture> on_buffer(const py::buffer& b, bool writable, F transfer) {
  auto* info = new py::buffer_info(b.request(writable));
  std::shared_ptr<const void> held = keep(info);
  auto f = wrap(transfer(info->ptr, static_cast<std::size_t>(info->size * info->itemsize)));
  hold_until(f, std::move(held));
  return f;
}

py::object value_mesh(const ValueMesh<Pickled>& vm) {
  py::list items;
  for (const auto& [p, v] : vm.items()) items.append(py::make_tuple(point(p), from_pickled(v)));
  return py::make_tuple(shape(vm.shape()), items);
}

/// argv as C wants it (null-terminated); the strings stay `argv`'s.
std::vector<char*> c_args(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));  // NOLINT
  args.push_back(nullptr);
  return args;
}

/// Flushes Python's sys.stdout and sys.stderr (what print() wrote to a pipe or a file), GIL
/// held.
void flush_streams() {
  try {
    const py::module_ sys = py::module_::import("sys");
    for (const char* name : {"stdout", "stderr"}) {
      const py::object stream = sys.attr(name);
      if (!stream.is_none()) stream.attr("flush")();
    }
  } catch (...) {
    // a stream already closed, or the interpreter going: nothing to flush
  }
}

bool interpreter_going() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() == 0 || Py_IsFinalizing() != 0;
#else
  return Py_IsInitialized() == 0 || _Py_IsFinalizing() != 0;
#endif
}

/// Before the program ends at once: Python's buffered output flushed. Another thread takes the
/// GIL for it (unless this one holds it); if that cannot be had within two seconds (the GIL held
/// by code that never lets go), the program ends without it.
void flush_python_output() {
  if (interpreter_going()) return;
  if (PyGILState_Check() != 0) {
    flush_streams();
    return;
  }
  auto flushed = std::make_shared<std::promise<void>>();
  std::thread([flushed] {
    if (!interpreter_going()) {
      const py::gil_scoped_acquire gil;
      flush_streams();
    }
    flushed->set_value();
  }).detach();
  flushed->get_future().wait_for(std::chrono::seconds(2));
}

/// Python's main thread, as the module found it when imported.
pthread_t g_main_thread;
/// Whether a signal of no other effect may wake the main thread from a wait of Python's own
/// (SIGURG, left alone if the program handles it itself).
bool g_can_wake_main = false;
/// Whether Python handles SIGINT in this program (not if it started with SIGINT ignored, as a
/// background job does), as the runtime found it when it started.
bool g_python_takes_sigint = false;

void note_main_thread() {
  g_main_thread = static_cast<pthread_t>(
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>());
  struct sigaction old {};
  if (::sigaction(SIGURG, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    struct sigaction wake {};
    wake.sa_handler = [](int) {};  // only to end the wait it interrupts (EINTR)
    sigemptyset(&wake.sa_mask);
    g_can_wake_main = ::sigaction(SIGURG, &wake, nullptr) == 0;
  }
}

/// Ctrl-C at a Python controller: KeyboardInterrupt in the main thread, which unwinds the
/// program (its finally blocks and with exits run) and stops the job on its way out. A wait of
/// the runtime's wakes to raise it; a wait of Python's (a lock, sleep) is woken by SIGURG.
bool interrupt_main_thread() {
  if (!g_python_takes_sigint) return false;  // the runtime stops the job itself
  PyErr_SetInterrupt();
  if (g_can_wake_main) {
    ::pthread_kill(g_main_thread, SIGURG);
    // A wait the main thread began just after it last looked for signals sleeps through that
    // wake: wake it again a few times (a wait of Python's goes on after a signal of no effect).
    std::thread([] {
      for (int i = 0; i < 25; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ::pthread_kill(g_main_thread, SIGURG);
      }
    }).detach();
  }
  return true;
}

/// The controller's runtime, owned by the Python module until close().
class PyRuntime {
 public:
  /// `stop_grace_ms` and `exit_wait_ms` (RuntimeOptions), where not negative.
  PyRuntime(const std::vector<std::string>& argv, std::int64_t stop_grace_ms,
            std::int64_t exit_wait_ms) {
    std::vector<char*> args = c_args(argv);
    RuntimeOptions options;
    if (stop_grace_ms >= 0) options.stop_grace = std::chrono::milliseconds(stop_grace_ms);
    if (exit_wait_ms >= 0) options.exit_wait = std::chrono::milliseconds(exit_wait_ms);
    py::gil_scoped_release unlocked;
    rt_ = std::make_unique<Runtime>(static_cast<int>(argv.size()), args.data(), options);
    // In Monarch's words under its runner (python -m baton.monarch sets BATON_MONARCH).
    const char* monarch = std::getenv("BATON_MONARCH");
    internal::RuntimeAccess::state(*rt_).unhandled_hint =
        monarch != nullptr && *monarch != '\0'
            ? "an actor may handle failures in its __supervise__, the controller by setting "
              "monarch.actor.unhandled_fault_hook"
            : "an actor may handle failures in its __supervise__, the controller with "
              "baton.set_supervise(hook)";
    internal::RuntimeAccess::state(*rt_).before_exit = flush_python_output;
    {
      const py::gil_scoped_acquire gil;
      const py::module_ signal = py::module_::import("signal");
      const py::object handler = signal.attr("getsignal")(signal.attr("SIGINT"));
      g_python_takes_sigint = PyCallable_Check(handler.ptr()) != 0;
    }
    internal::RuntimeAccess::state(*rt_).on_interrupt = interrupt_main_thread;
  }
  void close() {
    py::gil_scoped_release unlocked;
    rt_.reset();
  }
  /// Whether the output of proc mesh `mesh` ("": of every mesh) is printed here.
  void show_output(const std::string& mesh, bool shown) {
    if (!rt_) throw UsageError("the runtime is closed");
    auto& st = internal::RuntimeAccess::state(*rt_);
    std::lock_guard lock(st.mu);
    if (shown) {
      st.output_hidden.erase(mesh);
    } else {
      st.output_hidden.insert(mesh);
    }
  }
  void set_output_window(std::int64_t ms) {
    if (!rt_) throw UsageError("the runtime is closed");
    rt_->set_output_window(std::chrono::milliseconds(std::max<std::int64_t>(ms, 0)));
  }
  /// hook(report, mesh, rank, actor): the failure's text, the mesh and rank of the member that
  /// failed ("" and -1 for none) and its actor.
  using SuperviseHook =
      std::function<bool(const std::string&, const std::string&, std::int64_t, const std::string&)>;
  void set_supervise(SuperviseHook hook) {
    if (!rt_) throw UsageError("the runtime is closed");
    // Held through a pointer: the runtime copies its hook under its own lock, and copying a
    // Python function takes the GIL, which a thread waiting for that lock may hold.
    using Hook = SuperviseHook;
    const std::shared_ptr<Hook> held(new Hook(std::move(hook)), [](Hook* h) {
      if (Py_IsInitialized() == 0) return;  // the interpreter is gone: nothing to release
      const py::gil_scoped_acquire gil;
      delete h;
    });
    rt_->set_supervise([held](const MeshFailure& f) {
      py::gil_scoped_acquire gil;
      try {
        return (*held)(f.to_string(), f.mesh, f.rank, f.actor.to_string());
      } catch (const py::error_already_set& e) {
        detail::log_error("the controller's supervise hook raised: {}", e.what());
        return false;
      }
    });
  }
  std::string name() {
    if (!rt_) throw UsageError("the runtime is closed");
    return rt_->proc().id().name;
  }
  Runtime& runtime() {
    if (!rt_) throw UsageError("the runtime is closed");
    return *rt_;
  }

 private:
  std::unique_ptr<Runtime> rt_;
};

}  // namespace

Runtime& runtime_of(const py::object& rt) {
  return rt.cast<PyRuntime&>().runtime();
}

namespace {

/// Raises, as baton's Python exception classes, the runtime's failures.
/// (pybind11 hands the exception over by value.)
void translate(std::exception_ptr p) {
  auto raise = [](const char* cls, const std::string& text) {
    py::object type = py::module_::import("baton._errors").attr(cls);
    PyErr_SetString(type.ptr(), text.c_str());
  };
  try {
    std::rethrow_exception(std::move(p));
  } catch (const ActorError& e) {
    py::object point = py::none();
    if (e.point()) {
      const Point& at = *e.point();
      point = py::module_::import("baton._point").attr("Point")(at.labels, at.coords, at.rank);
    }
    py::object err =
        py::module_::import("baton._errors")
            .attr("actor_error")(e.actor(), e.endpoint(), e.where(), e.remote_message(), point);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err.ptr())), err.ptr());
  } catch (const SupervisionError& e) {
    raise("SupervisionError", e.what());
  } catch (const UndeliverableError& e) {
    raise("UndeliverableError", e.what());
  } catch (const TimeoutError& e) {
    raise("TimeoutError", e.what());
  } catch (const UsageError& e) {
    raise("UsageError", e.what());
  } catch (const store::KeyNotFound& e) {
    raise("KeyNotFound", e.what());
  } catch (const store::StoreError& e) {
    raise("StoreError", e.what());
  } catch (const RdmaError& e) {
    raise("RdmaError", e.what());
  }
}

}  // namespace

bool on_main_thread() {
  return ::pthread_equal(::pthread_self(), g_main_thread) != 0;
}

}  // namespace baton::python

PYBIND11_MODULE(_baton, m) {
  using namespace baton;          // NOLINT(google-build-using-namespace)
  using namespace baton::python;  // NOLINT(google-build-using-namespace)
  m.doc() = "baton's runtime, for the baton package";
  py::register_exception_translator(translate);
  note_main_thread();
  detail::set_python_stacks(&python_stacks);
  init_debug(m);

  py::class_<Bytes>(m, "Buffer", py::buffer_protocol())
      .def_buffer([](Bytes& b) {
        return py::buffer_info(const_cast<std::byte*>(b.data()), 1, "B", 1,  // NOLINT
                               {static_cast<py::ssize_t>(b.size())}, {1}, true);
      })
      .def("__len__", &Bytes::size);

  py::class_<PyRuntime>(m, "Runtime")
      .def(py::init<const std::vector<std::string>&, std::int64_t, std::int64_t>())
      .def("close", &PyRuntime::close)
      .def("show_output", &PyRuntime::show_output)
      .def("set_output_window", &PyRuntime::set_output_window)
      .def("name", &PyRuntime::name)
      .def("set_supervise", &PyRuntime::set_supervise);

  m.def("serve_worker", [](const std::vector<std::string>& argv) {
    std::vector<char*> args = c_args(argv);
    py::gil_scoped_release unlocked;
    Runtime rt(static_cast<int>(argv.size()), args.data());  // a worker: never returns
  });

  py::class_<ActingAs, std::shared_ptr<ActingAs>>(m, "ActingAs")
      .def("enter", &ActingAs::enter)
      .def("exit", &ActingAs::exit);
  // The running actor, for work another thread does as it (a concurrent endpoint's task).
  m.def("acting_as_current", []() -> std::shared_ptr<ActingAs> {
    detail::Cell* cell = detail::current_cell();
    if (cell == nullptr) throw UsageError("acting_as_current: not inside an actor");
    return std::make_shared<ActingAs>(detail::cell_ptr(*cell));
  });

  py::class_<PyFuture, std::shared_ptr<PyFuture>>(m, "Future")
      .def("ready", &PyFuture::ready)
      .def("wait", &PyFuture::wait, py::arg("seconds") = py::none())
      .def("value", &PyFuture::value);

  // Ports: opened by this process (the controller, or a worker), sent to from anywhere.
  py::class_<Port<Pickled>>(m, "Port")
      .def("send", [](const Port<Pickled>& p, py::handle v) { p.send(to_pickled(v)); })
      .def("to_wire", [](const Port<Pickled>& p) { return to_wire(p); })
      .def_static("from_wire", &from_wire<Port<Pickled>>);
  py::class_<PortReceiver<Pickled>>(m, "PortReceiver")
      .def(
          "recv",
          [](PortReceiver<Pickled>& r, std::optional<double> seconds) {
            std::optional<Pickled> got;
            const Blocking blocking("PortReceiver.recv()");
            take_interruptibly([&](std::chrono::milliseconds step) { got = r.recv(step); },
                               seconds);
            return from_pickled(*got);
          },
          py::arg("seconds") = py::none())
      .def("try_recv", [](PortReceiver<Pickled>& r) -> py::object {
        auto got = r.try_recv();
        if (!got) return py::none();
        return from_pickled(*got);
      });
  m.def("open_port", [] {
    auto [port, receiver] = detail::serving_proc("Channel.open()").open_port<Pickled>();
    return py::make_tuple(py::cast(port), py::cast(std::move(receiver)));
  });

  py::class_<Notifier, std::shared_ptr<Notifier>>(m, "Notifier")
      .def(py::init<>())
      .def("fd", &Notifier::fd)
      .def("watch", &Notifier::watch)
      .def("drain", &Notifier::drain);

  py::class_<PyStream>(m, "Stream").def("next", &PyStream::next, py::arg("seconds") = py::none());

  py::class_<Mesh>(m, "ActorMesh")
      .def("shape", [](const Mesh& a) { return shape(a.shape()); })
      .def("size", &Mesh::size)
      .def("point", [](const Mesh& a, std::size_t r) { return point(a.shape().point(r)); })
      .def("locations",
           [](const Mesh& a) {
             // Where the view's members are in the mesh as spawned (whose rank is their
             // location): (offset, strides), one stride per dimension of shape().
             const Slice& s = a.shape().slice();
             return py::make_tuple(s.offset(), s.strides());
           })
      .def("members",
           [](const Mesh& a) {
             std::vector<std::string> ids;  // in rank order
             ids.reserve(a.size());
             for (std::size_t r = 0; r < a.size(); ++r) ids.push_back(a.at(r).id().to_string());
             return ids;
           })
      .def("slice", [](const Mesh& a, const std::vector<Select>& s) { return a.slice(selects(s)); })
      .def("flatten", &Mesh::flatten)
      .def("split", &Mesh::split)
      .def("rename", &Mesh::rename)
      .def("call", verb([](const Mesh& a, const std::string& method, Pickled args) {
             return wrap(a.call(&PyActor::invoke, method, std::move(args)),
                         [](const ValueMesh<Pickled>& vm) { return value_mesh(vm); });
           }),
           py::arg("method"), py::arg("args"), py::arg("label") = "")
      .def("call_one", verb([](const Mesh& a, const std::string& method, Pickled args) {
             return wrap(a.call_one(&PyActor::invoke, method, std::move(args)), one_value);
           }),
           py::arg("method"), py::arg("args"), py::arg("label") = "")
      .def("choose", verb([](const Mesh& a, const std::string& method, Pickled args) {
             return wrap(a.choose(&PyActor::invoke, method, std::move(args)), one_value);
           }),
           py::arg("method"), py::arg("args"), py::arg("label") = "")
      .def(
          "reduce",
          [](const Mesh& a, const std::string& fn, const std::string& method, py::handle args,
             const std::string& label) {
            const Labelled named(label);
            return wrap(a.reduce(PyReducer{fn}, &PyActor::invoke, method, to_pickled(args)),
                        one_value);
          },
          py::arg("fn"), py::arg("method"), py::arg("args"), py::arg("label") = "")
      .def("broadcast", verb([](const Mesh& a, const std::string& method, Pickled args) {
             a.broadcast(&PyActor::invoke, method, std::move(args));
           }),
           py::arg("method"), py::arg("args"), py::arg("label") = "")
      .def("stream", verb([](const Mesh& a, const std::string& method, Pickled args) {
             return PyStream(a.stream(&PyActor::invoke, method, std::move(args)));
           }),
           py::arg("method"), py::arg("args"), py::arg("label") = "")
      .def("stop", [](const Mesh& a) { return wrap(a.stop()); })
      .def("to_wire", [](const Mesh& a) { return to_wire(a); })
      .def_static("from_wire", &from_wire<Mesh>);

  // One-sided buffers over Python memory: the Python side keeps the registered object alive.
  py::class_<RdmaBuffer>(m, "RdmaBuffer")
      .def_static("register_buffer",
                  [](const py::buffer& b) {
                    const py::buffer_info info = b.request(true);
                    return RdmaBuffer::register_memory(
                        info.ptr, static_cast<std::size_t>(info.size * info.itemsize));
                  })
      .def_static("register_pointer",
                  [](std::uintptr_t address, std::size_t size) {
                    return RdmaBuffer::register_memory(reinterpret_cast<void*>(address),  // NOLINT
                                                       size);
                  })
      .def("size", &RdmaBuffer::size)
      .def("device", &RdmaBuffer::device)
      .def("read_into",
           [](const RdmaBuffer& r, const py::buffer& dst, std::size_t offset) {
             return on_buffer(dst, true,
                              [&](void* p, std::size_t n) { return r.read_into(p, n, offset); });
           })
      .def("write_from",
           [](const RdmaBuffer& r, const py::buffer& src, std::size_t offset) {
             return on_buffer(src, false,
                              [&](void* p, std::size_t n) { return r.write_from(p, n, offset); });
           })
      .def("read_into_pointer",
           [](const RdmaBuffer& r, std::uintptr_t address, std::size_t size, std::size_t offset) {
             return wrap(r.read_into(reinterpret_cast<void*>(address), size, offset));  // NOLINT
           })
      .def("write_from_pointer",
           [](const RdmaBuffer& r, std::uintptr_t address, std::size_t size, std::size_t offset) {
             return wrap(
                 r.write_from(reinterpret_cast<const void*>(address), size, offset));  // NOLINT
           })
      .def("drop", [](const RdmaBuffer& r) { return wrap(r.drop()); })
      .def("to_wire", [](const RdmaBuffer& r) { return to_wire(r); })
      .def_static("from_wire", &from_wire<RdmaBuffer>);

  bind_collectives(m);
  bind_store(m);
  bind_exposed(m);

  py::class_<ProcMesh>(m, "ProcMesh")
      .def("shape", [](const ProcMesh& p) { return shape(p.shape()); })
      .def("size", &ProcMesh::size)
      .def("slice",
           [](const ProcMesh& p, const std::vector<Select>& s) { return p.slice(selects(s)); })
      .def("flatten", &ProcMesh::flatten)
      .def("split", &ProcMesh::split)
      .def("rename", &ProcMesh::rename)
      .def("proc_names",
           [](const ProcMesh& p) {
             std::vector<std::string> names;  // in rank order
             for (std::size_t r = 0; r < p.size(); ++r) names.push_back(p.proc(r).name);
             return names;
           })
      .def("spawn",
           [](const ProcMesh& p, const std::string& name, py::handle args) {
             Pickled spawn = to_pickled(args);
             const Blocking blocking("ProcMesh.spawn()");
             py::gil_scoped_release unlocked;
             return p.spawn<PyActor>(name, spawn);
           })
      .def("spawn_async",
           [](const ProcMesh& p, const std::string& name, py::handle args) {
             return wrap(p.spawn_async<PyActor>(name, to_pickled(args)),
                         [](const Mesh& mesh) { return py::cast(mesh); });
           })
      .def("stop", [](const ProcMesh& p) { return wrap(p.stop()); });

  bind_jobs(m);

  // `program`: [executable, args...] the workers run instead of this interpreter.
  m.def("this_proc", [] { return this_proc(); });
  m.def("spawn_procs_async", [](const Dims& dims, const std::vector<std::string>& program) {
    ProcProgram p;
    if (!program.empty()) {
      p.executable = program.front();
      p.args.assign(program.begin() + 1, program.end());
    }
    return wrap(this_host().spawn_procs_async(dims, p),
                [](const ProcMesh& procs) { return py::cast(procs); });
  });
}
