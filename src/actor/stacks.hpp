#pragma once

// Internal: the stacks of every thread of this process, for whoever looks inside the job (the
// admin API, `baton stack`, stall reports). Each thread is asked for its own native stack with a
// signal; the addresses are named afterwards from the process's symbols and line tables
// (elfutils' libdwfl). A process with a Python interpreter adds each thread's Python stack,
// through the hook its extension module sets.

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace baton::detail {

/// One thread of a process and where it is.
struct ThreadStack {
  int tid = 0;
  std::string name;                 // the thread's name (/proc/self/task/TID/comm)
  std::vector<std::string> actors;  // what it runs now: "proc/name[0]: endpoint E for 1.2 s"
  /// Native frames, innermost first: "function (file:line)" or "function+0x1f (library)".
  std::vector<std::string> native;
  /// Python frames, outermost first as a traceback prints them ("file:line in function" and
  /// the line's text); empty for a thread that runs no Python.
  std::vector<std::string> python;
  std::string note;  // why a stack is missing or cut short, if it is

  template <class Ar>
  void serialize(Ar& ar) {
    ar(tid, name, actors, native, python, note);
  }
};

/// Every thread of this process, by thread id. Each thread is given `per_thread` to answer;
/// one that does not (it blocks signals, or is stopped) is listed with a note and no frames.
/// One capture runs at a time in a process. `captured`, if given, runs once every thread has
/// answered and before their frames are named (which takes a while): what it reads describes
/// the moment of the capture.
std::vector<ThreadStack> thread_stacks(
    std::chrono::milliseconds per_thread = std::chrono::milliseconds(250),
    const std::function<void()>& captured = nullptr);

/// The native stack of the calling thread, named; `skip` frames of its callers are left out.
std::vector<std::string> this_thread_stack(int skip = 0);

/// The Python stack of each thread (by native thread id) that runs Python, set by the Python
/// extension module; thread_stacks calls it with the interpreter's lock not held.
using PythonStacks = std::function<std::map<int, std::vector<std::string>>()>;
void set_python_stacks(PythonStacks hook);

/// The calling thread's id (gettid), read once per thread.
int this_thread_id();

}  // namespace baton::detail
