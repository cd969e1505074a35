#pragma once

// The runtime of one program: the same binary is the controller and every worker.
//
//   int main(int argc, char** argv) {
//     baton::Runtime rt(argc, argv);   // in a worker process this never returns
//     auto procs = baton::this_host().spawn_procs({{"gpus", 8}});
//     ...
//   }
//
// A worker is started by the controller as this executable with its bootstrap in the
// environment (never on the command line); it serves its proc, and exits when the controller
// stops it or goes away. An actor in a worker may spawn procs of its own (this_host() works
// there too; co_await spawn_procs_async in an endpoint): it owns them, they die with it, and
// their failures go to its supervise().
//
// In the controller, SIGINT or SIGTERM stops the job in order (as HostMesh::stop() does) and
// exits with status 128 + the signal's number; the same signal again during that stop kills the
// workers and exits at once. The job's directory (its sockets, CA and key) is removed on every
// exit the controller lives to see; one left by a controller that died is removed by the next
// controller of the same user.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "baton/host/output.hpp"
#include "baton/mesh/mesh.hpp"

namespace baton {

namespace internal {
struct RuntimeAccess;
struct HostsAccess;
struct Hosts;
struct RuntimeSlot;
}  // namespace internal

/// How the controller runs; every field has a working default.
struct RuntimeOptions {
  /// Workers' stdout/stderr: aggregation window and where lines go (see OutputOptions). The
  /// environment variable BATON_LOG_WINDOW_MS, if set, overrides the window (0: off).
  OutputOptions output;
  /// The controller's supervise hook: a failure that no owner below handled (a mesh the
  /// controller spawned lost a member, or an actor's supervise() returned false all the way
  /// up). Runs on a runtime thread; return true if handled. Unset, or false: the controller
  /// prints the report and exits with status 1.
  std::function<bool(const MeshFailure&)> supervise;
  /// How long a proc mesh's stop() waits, for each step, before it moves on: for the actors'
  /// on_stop hooks, then for the processes to exit after SIGTERM (then SIGKILL).
  std::chrono::milliseconds stop_grace{5000};
  /// When a worker's link closes, how long to wait for its process to be seen exiting: calls
  /// waiting on it then fail with a SupervisionError saying how it died. A worker still running
  /// after this fails them as a lost link (UndeliverableError). A process that exits is seen at
  /// once (its pidfd), so this bounds only the case of a link lost while its process lives. It
  /// counts from the link's closing: workers whose links close together are waited for together.
  std::chrono::milliseconds exit_wait{2000};
  /// Links between the job's procs (the controller's and every worker's): heartbeats, repair,
  /// how much a link holds for sending before its senders wait (backpressure), and TLS for
  /// links over TCP: on by default, with a CA and certificate the controller makes for the job
  /// in its directory; set `link.tls`, or BATON_TLS_CERT, BATON_TLS_KEY and BATON_TLS_CA, to use
  /// your own. The secret is made for the job unless `link.secret` is set, or BATON_CREDENTIALS
  /// names a directory of credentials shared with hosts' agents (`baton-host
  /// --make-credentials DIR` makes one; it also holds the TLS files).
  net::LinkOptions link;
  /// Messages from other processes waiting in one actor's mailbox above which the link that
  /// brings them stops reading (see ProcOptions::mailbox_limit).
  std::size_t mailbox_limit = 10000;
  /// The name of this process's proc. Empty: "ctl", or, in a job whose credentials its hosts'
  /// agents share (BATON_CREDENTIALS), "ctl-<host>-<pid>", so that several controllers can use
  /// one agent. A host agent names itself after the address it advertises.
  std::string name;
};

class Runtime {
 public:
  Runtime(int argc, char** argv, RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// The controller's own proc.
  Proc& proc();
  /// The runtime of the calling context (this process's); throws UsageError if none was
  /// created. For a program's own code, where the runtime is not at hand: this_host(),
  /// this_proc() and job::attach() use it; the library itself takes the Runtime it needs.
  static Runtime& get();

  /// Returns once every line the workers have written so far is printed.
  void flush_output();
  /// Changes how long identical worker lines wait for each other (zero: no aggregation).
  void set_output_window(std::chrono::milliseconds window);
  /// The link options of every proc of this job: its secret, and its TLS certificates (made
  /// for the job unless RuntimeOptions::link.tls or BATON_TLS_CERT/KEY/CA name the user's). A
  /// Proc made with them can link to the job's procs.
  net::LinkOptions link_options() const;
  /// Replaces the controller's supervise hook (see RuntimeOptions::supervise).
  void set_supervise(std::function<bool(const MeshFailure&)> handler);

 private:
  struct State;
  [[noreturn]] void run_worker();
  /// What became of a worker seen lost at `since` (its link closed), if it was ours and it
  /// exited: waits until `since` + RuntimeOptions::exit_wait for it to be seen exiting.
  std::optional<std::string> exit_report(const std::string& proc_name,
                                         std::chrono::steady_clock::time_point since);
  void child_exited(int pid, const std::string& what);
  void unhandled(const MeshFailure& event);
  /// SIGINT or SIGTERM: stops every proc mesh as stop() does, then exits with 128 + sig.
  [[noreturn]] void stop_on_signal(int sig);
  /// The same signal again while that stop runs: kills the workers and exits at once.
  [[noreturn]] void kill_on_signal(int sig);
  friend class HostMesh;
  friend struct internal::RuntimeAccess;
  friend struct internal::HostsAccess;
  std::unique_ptr<State> state_;
};

/// What worker processes run. By default this program, with its arguments; another program
/// (this host only) must construct a baton::Runtime first thing, as every worker does: a C++
/// program whose actors a Python controller uses (baton/python/expose.hpp), say.
struct ProcProgram {
  std::string executable;         // empty: this program
  std::vector<std::string> args;  // its arguments after argv[0] (with `executable` only)
};

/// Hosts on which procs can be started: this host (this_host()), or the hosts of a job, each
/// running an agent (`baton-host`), laid out on one dimension, {"hosts": H}.
class HostMesh {
 public:
  /// This host, of the runtime of the calling context (this_host() is the same, its runtime
  /// named once).
  HostMesh() = default;

  /// {} for this host; {"hosts": H} for the hosts of a job.
  const Shape& shape() const;
  /// How many hosts.
  std::size_t size() const { return shape().len(); }

  /// Starts one worker process per member of the shape on every host: on H hosts with dims
  /// {{"gpus", G}} the proc mesh is {"hosts": H, "gpus": G} (on this host, just {"gpus": G}).
  /// With a "gpus" dimension each proc sees its own device through
  /// CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES. Returns once the processes are started, without
  /// waiting for them: the future completes once every worker has linked, on the thread that
  /// saw the last one link. It fails (every worker of the call stopped first) if a worker exits
  /// before, if one does not link within 30 s, if a host cannot start it (its agent's words),
  /// or if the procs are stopped before (this_host().stop(), the runtime's end). Dropping every
  /// copy of the future stops the procs once they are up, as dropping the mesh would. Inside an
  /// actor, `co_await` it (GCC 12 cannot compile a braced list inside a co_await expression:
  /// name the future first); the caller (the running actor, or the controller) owns the procs.
  Future<ProcMesh> spawn_procs_async(
      const std::vector<std::pair<std::string, std::size_t>>& dims) const;
  /// spawn_procs_async(dims).get(): blocks until the procs are up and rethrows its failures.
  /// Inside an actor it throws UsageError, as Future::get() does there (F-2): co_await
  /// spawn_procs_async.
  ProcMesh spawn_procs(const std::vector<std::pair<std::string, std::size_t>>& dims) const;
  /// The same, with the workers running `program`: on this host only (UsageError elsewhere).
  Future<ProcMesh> spawn_procs_async(const std::vector<std::pair<std::string, std::size_t>>& dims,
                                     const ProcProgram& program) const;
  /// Stops every proc mesh this process started on these hosts, each as ProcMesh::stop() does,
  /// without blocking: calls to their actors fail from now on, and the future completes once
  /// every process is gone; spawn_procs can start new ones.
  Future<void> stop() const;

 private:
  friend struct internal::HostsAccess;
  std::shared_ptr<internal::Hosts> hosts_;     // null: this host
  std::shared_ptr<internal::RuntimeSlot> rt_;  // whose hosts; null: the calling context's
};

/// This host, as a mesh of hosts of size one.
HostMesh this_host();

/// This process's own proc, as a proc mesh of no dimensions (one member): actors spawned on it
/// run in this process, beside the controller's code (or a worker's other actors), and are
/// called like any others. Stopping it does nothing (the process is not the mesh's to end);
/// stop the actor meshes instead.
ProcMesh this_proc();

}  // namespace baton
