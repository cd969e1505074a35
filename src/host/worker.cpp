#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "actor/failures.hpp"
#include "actor/proc_state.hpp"
#include "log/log.hpp"
#include "mesh/agent.hpp"
#include "runtime_impl.hpp"

namespace baton {

using namespace internal;

void Runtime::run_worker() {
  // No orphans: die with the process that started us, even if it is SIGKILLed. (With the
  // thread that started us, to be exact: the spawner's, which lives as long as its runtime.)
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const char* parent = std::getenv(kParentVar);
  if (parent != nullptr && ::getppid() != std::atoi(parent)) std::_Exit(1);
  const char* name = std::getenv(kProcVar);
  detail::set_log_proc(name);
  // `ps` and `ss` show the proc's name (its command line says "baton <name>" in full).
  ::prctl(PR_SET_NAME, ("baton " + std::string(name)).substr(0, 15).c_str());
  // A terminal's Ctrl-C reaches every process of its foreground group: the controller stops
  // the workers in order, so they do not die of it first.
  ::signal(SIGINT, SIG_IGN);
  const char* controller = std::getenv(kControllerVar);
  const char* controller_addr = std::getenv(kControllerAddrVar);
  if (controller == nullptr || controller_addr == nullptr) {
    detail::log_error("worker {} started without {}/{}; it must be started by a baton controller",
                      name, kControllerVar, kControllerAddrVar);
    std::_Exit(2);
  }
  const char* dir = std::getenv(kDirVar);
  if (const char* secret = std::getenv(kSecretVar)) {
    state_->secret = secret;
    ::unsetenv(kSecretVar);  // not for whatever this process starts on its own
  }
  {
    const char* cert = std::getenv(kTlsCertVar);
    const char* key = std::getenv(kTlsKeyVar);
    const char* ca = std::getenv(kTlsCaVar);
    if (cert != nullptr && key != nullptr && ca != nullptr) {
      state_->link.tls = net::TlsOptions{cert, key, ca};
    }
  }
  if (state_->secret.empty()) {
    detail::log_error("worker {} started without the job's secret ({})", name, kSecretVar);
    std::_Exit(2);
  }
  // Output goes to the controller over a pipe: lines, not blocks, so they come back promptly.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  {
    detail::install_cast();
    // A failure nobody here handled goes to whoever started this process.
    const ActorId spawner{ProcId::parse(controller), "client", 0};
    ProcOptions proc_options{
        .name = name, .on_unhandled_failure = [spawner](const MeshFailure& ev) {
          if (detail::forward_failure(spawner, ev)) return;
          detail::log_error("unhandled failure, and its owner {} cannot be reached:\n  {}",
                            spawner.to_string(), ev.to_string());
          std::_Exit(1);
        }};
    proc_options.link = state_->link;
    proc_options.link.secret = state_->secret;
    proc_options.mailbox_limit = state_->mailbox_limit;
    state_->proc = std::make_unique<Proc>(std::move(proc_options));
    Proc& proc = *state_->proc;
    proc.spawn<detail::ProcAgent>("agent");
    state_->stall_after = detail::stall_after_from_env();
    state_->start_stall_watch();
    state_->prefix = std::string(name) + "-";
    // Other workers link here when a cast or a passed reference sends them our way: over TCP
    // where procs on other hosts must reach us, else over a unix socket.
    if (dir != nullptr) state_->dir = dir;
    if (const char* host = std::getenv(kServeHostVar); host != nullptr && *host != '\0') {
      const std::string h = std::string(host).find(':') != std::string::npos
                                ? "[" + std::string(host) + "]"
                                : std::string(host);
      state_->address = proc.serve(Address::parse("tcp://" + h + ":0"));
    } else if (dir != nullptr) {
      state_->address =
          proc.serve(Address::parse("unix://" + std::string(dir) + "/" + name + ".sock"));
    }
    detail::set_exit_probe([this](const std::string& peer, detail::LostSince since) {
      return exit_report(peer, since);
    });
    if (const char* trace = std::getenv("BATON_TRACE"); trace != nullptr && *trace != '\0') {
      state_->trace_file = trace;
    }
    detail::set_shutdown_hook([this] {
      state_->stop_groups();
      if (!state_->trace_file.empty()) state_->write_trace_part();  // before it ends
    });
    state_->node->extension<RuntimeSlot>()->runtime.store(this);  // actors here may spawn procs
    std::mutex mu;
    std::condition_variable cv;
    bool lost = false;
    proc.connect(ProcId::parse(controller), Address::parse(controller_addr),
                 [&](net::LinkEnd end, const std::string& reason) {
                   // A controller that closed the link on purpose needs no word; any other end
                   // of it (a broken ring, a silent or vanished peer) is what the report of
                   // this proc's exit should say.
                   if (end != net::LinkEnd::peer_closed) {
                     detail::log_warn("the link to controller {} closed ({}): this proc exits",
                                      controller, reason);
                   }
                   std::lock_guard lock(mu);
                   lost = true;
                   cv.notify_all();
                 });
    // Up: the spawner hears it on its ready port, over the link just made (after our hello).
    if (const char* ready = std::getenv(kReadyVar)) {
      const PortId port{ActorId{ProcId::parse(controller), "client", 0},
                        std::strtoull(ready, nullptr, 10)};
      Port<std::string>(port).send(state_->address.to_string());
    }
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return lost; });  // the controller stopped us or went away
  }
  std::fflush(stdout);
  std::_Exit(0);  // the procs this one started die with it (PR_SET_PDEATHSIG)
}

}  // namespace baton
