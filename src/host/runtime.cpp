#include "baton/host/runtime.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
#include <tuple>

#include "actor/failures.hpp"
#include "actor/node.hpp"
#include "actor/proc_state.hpp"
#include "host/hosts.hpp"
#include "log/log.hpp"
#include "mesh/agent.hpp"
#include "mesh/stall.hpp"
#include "runtime_impl.hpp"

namespace baton {

using namespace internal;

namespace {

/// BATON_TRACE names where the run's trace goes when it ends: a place it cannot go is said as the
/// run starts, not after it.
void check_trace_file(const std::string& trace) {
  const std::filesystem::path file(trace);
  const std::filesystem::path dir = file.has_parent_path() ? file.parent_path() : ".";
  std::error_code ec;
  std::string why;
  if (!std::filesystem::is_directory(dir, ec)) {
    why = "there is no directory " + dir.string() + " to write it in";
  } else if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    why = "this user may not write in " + dir.string();
  } else if (std::filesystem::is_directory(file, ec)) {
    why = "it is a directory";
  }
  if (!why.empty()) {
    throw UsageError("BATON_TRACE=" + trace + ": the run's trace cannot go there (" + why +
                     "); name a file in a directory this user may write, or unset it");
  }
}
/// "ctl-<short host name>-<pid>": a controller's name among others that share hosts.
std::string unique_controller_name() {
  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  std::string name = "ctl-";
  for (const char* c = host; *c != '\0' && *c != '.'; ++c) {
    name += (std::isalnum(static_cast<unsigned char>(*c)) != 0 || *c == '-') ? *c : '_';
  }
  return name + "-" + std::to_string(::getpid());
}

OutputOptions output_options(OutputOptions options) {
  const char* w = std::getenv("BATON_LOG_WINDOW_MS");
  if (w == nullptr || *w == '\0') return options;
  char* end = nullptr;
  const long ms = std::strtol(w, &end, 10);
  if (end == w || *end != '\0' || ms < 0 || ms > 60'000) {
    if (std::getenv(kProcVar) != nullptr) return options;  // the controller says so, once
    detail::log_warn(
        "BATON_LOG_WINDOW_MS={} is not a number of milliseconds from 0 (print each line as it "
        "comes) to 60000; the same line from several procs is waited for {} ms",
        w, options.window.count());
    return options;
  }
  options.window = std::chrono::milliseconds(ms);
  return options;
}
}  // namespace

Runtime::Runtime(int argc, char** argv, RuntimeOptions options)
    : state_(std::make_unique<State>()) {
  if (state_->node->extension<RuntimeSlot>()->runtime.load() != nullptr) {
    throw UsageError("only one baton::Runtime may exist in a process at a time");
  }
  for (int i = 0; i < argc; ++i) state_->argv.emplace_back(argv[i]);
  state_->stop_grace = options.stop_grace;
  state_->exit_wait = options.exit_wait;
  state_->link = options.link;
  state_->mailbox_limit = options.mailbox_limit;
  state_->supervise = std::move(options.supervise);
  {
    // The lines of procs started for a controller on another host go to that controller.
    OutputOptions out = output_options(std::move(options.output));
    out.sink = [this, user = std::move(out.sink)](const OutputLine& line) {
      std::optional<ActorId> to;
      bool hidden = false;
      {
        std::lock_guard lock(state_->mu);
        auto it = state_->output_to.find(line.mesh);
        if (it != state_->output_to.end()) to = it->second;
        hidden = state_->output_hidden.contains(line.mesh) || state_->output_hidden.contains("");
      }
      if (hidden && !to) return;
      if (to) {
        detail::make_ref<HostClient>(*to, nullptr).send(&HostClient::output, line);
      } else if (user) {
        user(line);
      } else {
        OutputForwarder::print(line);
      }
    };
    state_->output = std::make_unique<OutputForwarder>(std::move(out));
  }
  state_->watcher = std::make_unique<ChildWatcher>([this](pid_t pid, const std::string& what) {
    state_->start_exited(pid, what);
    child_exited(pid, what);
  });
  state_->spawner = std::make_unique<Spawner>();
  state_->stops = std::make_unique<StopWorker>();
  state_->timers = std::make_unique<Timers>();
  if (std::getenv(kProcVar) != nullptr) run_worker();
  // Read before anything is made: a bad value leaves no job directory behind.
  const std::optional<std::string> admin_at = admin_address_from_env();
  state_->stall_after = detail::stall_after_from_env();
  if (const char* trace = std::getenv("BATON_TRACE"); trace != nullptr && *trace != '\0') {
    check_trace_file(trace);
    state_->trace_file = trace;  // every process of the job records from its start
  }
  std::string name = options.name;
  state_->dir = make_job_dir();
  state_->own_dir = true;
  // A runtime that fails to start (bad credentials, certificates or address) leaves no job
  // directory behind: no destructor runs for it.
  struct RemoveDirIfThrown {
    State& state;
    const int uncaught = std::uncaught_exceptions();
    explicit RemoveDirIfThrown(State& s) : state(s) {}
    RemoveDirIfThrown(const RemoveDirIfThrown&) = delete;
    RemoveDirIfThrown& operator=(const RemoveDirIfThrown&) = delete;
    ~RemoveDirIfThrown() {
      if (std::uncaught_exceptions() > uncaught) state.remove_job_dir();
    }
  } const remove_if_thrown{*state_};
  // The job's secret: the options', else that of the credentials the hosts' agents share,
  // else a fresh one.
  state_->secret = state_->link.secret;
  if (!state_->secret.empty()) state_->credentials_from = "the runtime's options";
  if (const char* dir = std::getenv(kCredentialsVar); dir != nullptr && *dir != '\0') {
    Credentials c = load_credentials(dir);
    if (state_->secret.empty()) {
      state_->secret = c.secret;
      state_->credentials_from = std::string(kCredentialsVar) + "=" + dir;
    }
    if (!state_->link.tls.enabled()) state_->link.tls = c.tls;
    if (name.empty()) name = unique_controller_name();
  }
  if (name.empty()) name = "ctl";
  detail::set_log_proc(name);
  if (state_->secret.empty()) {
    state_->secret = net::new_job_secret();
    state_->credentials_from = std::string("made for this run (") + kCredentialsVar +
                               " was not set when its runtime started)";
  }
  // TLS for every link that leaves the host: the user's certificates (options, else the
  // environment), or a CA and certificate made for this job.
  if (!state_->link.tls.enabled()) {
    const char* cert = std::getenv(kTlsCertVar);
    const char* key = std::getenv(kTlsKeyVar);
    const char* ca = std::getenv(kTlsCaVar);
    if (cert != nullptr && key != nullptr && ca != nullptr) {
      state_->link.tls = net::TlsOptions{cert, key, ca};
    } else if (cert != nullptr || key != nullptr || ca != nullptr) {
      throw UsageError(std::string("set all three of ") + kTlsCertVar + ", " + kTlsKeyVar +
                       " and " + kTlsCaVar + " to use your own TLS certificates, or none");
    } else {
      state_->link.tls = net::make_job_certificates(state_->dir.string());
    }
  }
  detail::install_cast();
  ProcOptions proc_options{
      .name = name, .on_unhandled_failure = [this](const MeshFailure& ev) { unhandled(ev); }};
  proc_options.link = state_->link;
  proc_options.link.secret = state_->secret;
  proc_options.mailbox_limit = state_->mailbox_limit;
  state_->proc = std::make_unique<Proc>(std::move(proc_options));
  state_->start_stall_watch();
  state_->address =
      state_->proc->serve(Address::parse("unix://" + (state_->dir / (name + ".sock")).string()));
  detail::set_exit_probe([this](const std::string& peer, detail::LostSince since) {
    std::function<void(const std::string&)> lost;
    {
      std::lock_guard lock(state_->mu);
      lost = state_->peer_lost;
    }
    if (lost) lost(peer);
    return exit_report(peer, since);
  });
  detail::set_shutdown_hook([this] { state_->stop_groups(); });
  state_->signals = std::make_unique<StopSignals>(
      [this](int sig) {
        // A host language may take the first Ctrl-C itself (Python raises KeyboardInterrupt).
        if (sig == SIGINT && state_->on_interrupt && state_->on_interrupt()) return;
        stop_on_signal(sig);
      },
      [this](int sig) { kill_on_signal(sig); });
  if (admin_at) {
    state_->admin = std::make_unique<AdminServer>(*admin_at, state_->dir, state_->admin_source(),
                                                  state_->link.tls);
    detail::log_info("admin at {} (token in {})", state_->admin->url(),
                     (state_->dir / kAdminTokenFile).string());
  }
  state_->node->extension<RuntimeSlot>()->runtime.store(this);
}

void Runtime::unhandled(const MeshFailure& event) {
  if (state_->killing.load()) return;  // the job's processes die on purpose: the program ends
  std::function<bool(const MeshFailure&)> handler;
  {
    std::lock_guard lock(state_->mu);
    handler = state_->supervise;
    state_->failures.push_back(event.to_string());  // for the admin API
    if (state_->failures.size() > State::kFailuresKept) state_->failures.pop_front();
  }
  if (handler) {
    try {
      if (handler(event)) return;
    } catch (const std::exception& e) {
      detail::log_error("the controller's supervise hook threw: {}", e.what());
    }
  }
  state_->output->flush();
  detail::log_error("a failure that nothing handled stops this program:\n  {}\n  ({})",
                    event.to_string(), state_->unhandled_hint);
  if (state_->before_exit) state_->before_exit();
  state_->remove_job_dir();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(1);  // every worker dies with this process (PR_SET_PDEATHSIG)
}

Runtime::~Runtime() {
  if (!state_->trace_file.empty()) state_->write_trace();
  state_->admin.reset();  // it reads the state below
  {
    std::lock_guard lock(state_->life->mu);
    state_->life->alive = false;  // handles left behind are inert from now on
  }
  state_->signals.reset();  // the previous handlers are back
  detail::set_exit_probe(nullptr);
  detail::set_shutdown_hook(nullptr);
  state_->stop_groups();
  state_->timers.reset();  // no start-up deadline may fire into what goes below
  state_->stops.reset();   // what is still queued finds its group stopped
  state_->stall_watch.reset();
  state_->proc.reset();
  state_->spawner.reset();
  state_->watcher.reset();
  state_->output.reset();  // the workers are gone: print what they left in the pipes
  state_->remove_job_dir();
  state_->node->extension<RuntimeSlot>()->runtime.store(nullptr);
}

Proc& Runtime::proc() {
  return *state_->proc;
}

internal::RuntimeState& internal::RuntimeAccess::state(Proc& proc) {
  Runtime* rt = detail::state_of(proc).node->extension<RuntimeSlot>()->runtime.load();
  if (rt == nullptr) throw UsageError("proc " + proc.id().name + " outlived its runtime");
  return *rt->state_;
}

std::shared_ptr<internal::RuntimeSlot> internal::RuntimeAccess::slot(Runtime& rt) {
  return rt.state_->node->extension<RuntimeSlot>();
}

Runtime& internal::RuntimeAccess::live(const std::shared_ptr<RuntimeSlot>& slot,
                                       std::string_view what) {
  Runtime* rt = slot ? slot->runtime.load() : nullptr;
  if (rt == nullptr) {
    throw UsageError(std::string(what) +
                     ": its baton::Runtime is gone (used after the runtime it was made with "
                     "ended); make it after the runtime and drop it before");
  }
  return *rt;
}

Runtime& Runtime::get() {
  auto node = detail::node_here();
  Runtime* rt = node ? node->extension<RuntimeSlot>()->runtime.load() : nullptr;
  if (rt == nullptr) {
    throw UsageError(
        "no baton::Runtime: create `baton::Runtime rt(argc, argv);` at the top of main");
  }
  return *rt;
}

void Runtime::flush_output() {
  state_->output->flush();
}

void Runtime::set_output_window(std::chrono::milliseconds window) {
  state_->output->set_window(window);
}

net::LinkOptions Runtime::link_options() const {
  net::LinkOptions o = state_->link;
  o.secret = state_->secret;
  return o;
}

void Runtime::set_supervise(std::function<bool(const MeshFailure&)> handler) {
  std::lock_guard lock(state_->mu);
  state_->supervise = std::move(handler);
}

}  // namespace baton
