// HostMesh's proc groups: their orderly stop (on the runtime's stop thread), and this host.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string_view>

#include "actor/proc_state.hpp"
#include "log/log.hpp"
#include "mesh/agent.hpp"
#include "runtime_impl.hpp"

extern char** environ;

namespace baton {
namespace internal {

Future<void> all_of(const std::vector<std::shared_ptr<detail::StateBase>>& parts) {
  if (parts.empty()) return make_ready_future();
  struct Join {
    std::mutex mu;
    std::size_t left = 0;
    std::exception_ptr error;
    Promise<void> done;
  };
  auto join = std::make_shared<Join>();
  join->left = parts.size();
  for (const auto& state : parts) {
    state->on_ready([join, state] {
      bool last = false;
      {
        std::lock_guard lock(join->mu);
        if (!join->error) join->error = state->error();
        last = --join->left == 0;
      }
      if (!last) return;
      if (join->error) {
        join->done.set_exception(join->error);
      } else {
        join->done.set_value();
      }
    });
  }
  return join->done.get_future();
}

Future<void> all_of(const std::vector<Future<void>>& parts) {
  std::vector<std::shared_ptr<detail::StateBase>> states;
  states.reserve(parts.size());
  for (const auto& p : parts) states.push_back(p.state());
  return all_of(states);
}

Future<void> LocalProcGroup::stop(std::chrono::milliseconds grace) {
  std::unique_lock lock(mu_);
  if (phase_ == Phase::idle && !stops_.on_this_thread()) {
    phase_ = Phase::queued;
    stopping->store(true);
    lock.unlock();
    auto self = shared_from_this();
    if (!stops_.post([self, grace] { self->run_queued(grace); })) {
      self->run_queued(grace);  // the runtime is going: its stop worker takes no more
    }
    return done_.get_future();
  }
  // On the stop thread itself (a continuation of another stop's future), a stop not yet begun
  // runs here and now: queued behind the job that runs this, it could never be waited for.
  if ((phase_ != Phase::idle && phase_ != Phase::queued) || !stops_.on_this_thread()) {
    return done_.get_future();
  }
  phase_ = Phase::running;
  stopping->store(true);
  lock.unlock();
  run(grace);
  return done_.get_future();
}

void LocalProcGroup::stop_here(std::chrono::milliseconds grace) {
  bool mine = false;
  {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::idle || phase_ == Phase::queued) {
      phase_ = Phase::running;
      stopping->store(true);
      mine = true;
    }
  }
  if (mine) run(grace);
  done_.get_future().state()->wait();
}

void LocalProcGroup::run_queued(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mu_);
    if (phase_ != Phase::queued) return;  // someone ran it already
    phase_ = Phase::running;
  }
  run(grace);
}

void LocalProcGroup::run(std::chrono::milliseconds grace) {
  std::vector<Child> children;
  {
    std::lock_guard lock(mu_);
    children = children_;
  }
  std::string failed;  // the processes that outlived SIGKILL
  try {
    using Clock = std::chrono::steady_clock;
    // 1. Orderly: each proc stops the meshes it owns, then its actors, running on_stop.
    std::vector<Future<int>> acks;
    for (auto& c : children) {
      const ActorId agent{c.name, "agent", 0};
      acks.push_back(detail::agent_of(agent.proc).call(&detail::ProcAgent::shutdown));
    }
    auto deadline = Clock::now() + grace;
    for (std::size_t i = 0; i < acks.size(); ++i) {
      if (!acks[i].state()->wait_until(deadline)) {
        detail::log_warn(
            "proc {} did not finish stopping its actors within {} ms (an endpoint or on_stop "
            "still running, or waiting for something that never comes?); it gets SIGTERM now",
            children[i].name.name, grace.count());
      }
    }
    // 2. SIGTERM, then SIGKILL for whatever is still running after the grace.
    for (auto& c : children) ::kill(c.pid, SIGTERM);
    deadline = Clock::now() + grace;
    for (auto& c : children) {
      if (!watcher_.wait(c.pid, deadline)) {
        detail::log_warn("proc {} ignored SIGTERM for {} ms; sending SIGKILL", c.name.name,
                         grace.count());
        ::kill(c.pid, SIGKILL);
        if (!watcher_.wait(c.pid, Clock::now() + kKillWait)) {
          failed +=
              (failed.empty() ? "" : ", ") + c.name.name + " (pid " + std::to_string(c.pid) + ")";
          continue;  // still ours: the watcher reaps it if it ever goes
        }
      }
      watcher_.forget(c.pid);
    }
    std::vector<ProcId> names;
    names.reserve(children.size());
    for (auto& c : children) names.push_back(c.name);
    if (gone_) gone_(names);
  } catch (...) {
    {
      std::lock_guard lock(mu_);
      phase_ = Phase::done;
    }
    done_.set_exception(std::current_exception());
    return;
  }
  {
    std::lock_guard lock(mu_);
    phase_ = Phase::done;
  }
  if (failed.empty()) {
    done_.set_value();
  } else {
    done_.set_exception(std::make_exception_ptr(std::runtime_error(
        "stop: " + failed + " still running " + std::to_string(kKillWait.count()) +
        " s after SIGKILL (stuck in the kernel: see its state with `ps -o pid,stat,wchan`); "
        "the rest of the mesh is gone")));
  }
}

}  // namespace internal

using namespace internal;

std::vector<std::shared_ptr<LocalProcGroup>> Runtime::State::live_groups() {
  std::vector<std::shared_ptr<LocalProcGroup>> live;
  std::lock_guard lock(mu);
  for (auto& w : groups) {
    if (auto g = w.lock()) live.push_back(std::move(g));
  }
  return live;
}

void Runtime::State::stop_groups() {
  for (auto& g : live_groups()) g->stop_here(stop_grace);
}

Future<void> Runtime::State::stop_groups_async() {
  std::vector<Future<void>> stopped;
  for (auto& g : live_groups()) stopped.push_back(g->stop(stop_grace));
  return all_of(stopped);
}

}  // namespace baton
