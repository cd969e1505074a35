#include "baton/host/output.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <deque>
#include <map>
#include <tuple>

namespace baton {

std::string OutputLine::to_string() const {
  std::string ranges;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!ranges.empty()) ranges += ',';
    ranges += std::to_string(ranks[i]);
    if (j > i) ranges += '-' + std::to_string(ranks[j]);
    i = j + 1;
  }
  std::string out = "[" + mesh + " " + ranges + "] " + text;
  if (ranks.size() > 1) out += " (x" + std::to_string(ranks.size()) + ")";
  return out;
}

struct OutputForwarder::State {
  using Clock = std::chrono::steady_clock;

  struct Pipe {
    int fd;
    int stream;
    std::string mesh;
    std::size_t rank;
    std::string partial;
  };
  // A line waiting for copies from other ranks until its deadline.
  struct Pending {
    OutputLine line;
    Clock::time_point deadline;
  };

  OutputOptions options;
  int wake[2] = {-1, -1};

  std::mutex mu;
  std::condition_variable cv;
  std::vector<Pipe> added;  // handed over to the reader thread on its next turn
  std::map<std::pair<std::string, std::size_t>, std::deque<std::string>> recent;  // stderr
  std::deque<KeptLine> kept_lines;  // every stream, every rank (under mu)
  std::uint64_t kept_seq = 0;
  std::uint64_t flush_asked = 0;
  std::uint64_t flush_done = 0;
  bool stopping = false;
  std::once_flag started_once;
  std::atomic<bool> started{false};

  // The reader thread's own.
  std::vector<Pipe> pipes;
  std::deque<Pending> pending;  // in order of first arrival, so deadlines ascend

  void emit(const OutputLine& line) {
    if (options.sink) {
      options.sink(line);
    } else {
      OutputForwarder::print(line);
    }
  }

  std::chrono::milliseconds window() {
    std::lock_guard lock(mu);
    return options.window;
  }

  void keep(const OutputLine& line) {
    std::lock_guard lock(mu);
    kept_lines.push_back({line, std::chrono::system_clock::now(), ++kept_seq});
    KeptLine& last = kept_lines.back();
    if (last.line.text.size() > kKeptChars) last.line.text.resize(kKeptChars);
    if (kept_lines.size() > kKeptLines) kept_lines.pop_front();
  }

  void on_line(const Pipe& p, std::string text) {
    keep(OutputLine{p.stream, p.mesh, {p.rank}, text});
    if (p.stream == 2) {
      std::lock_guard lock(mu);
      auto& r = recent[{p.mesh, p.rank}];
      r.push_back(text.substr(0, 512));
      if (r.size() > kRecentLines) r.pop_front();
    }
    const auto w = window();
    if (w.count() == 0) {
      emit(OutputLine{p.stream, p.mesh, {p.rank}, std::move(text)});
      return;
    }
    // The newest pending copy of this line takes the rank, unless the rank already printed it.
    for (auto it = pending.rbegin(); it != pending.rend(); ++it) {
      OutputLine& l = it->line;
      if (l.stream != p.stream || l.mesh != p.mesh || l.text != text) continue;
      if (std::binary_search(l.ranks.begin(), l.ranks.end(), p.rank)) break;
      l.ranks.insert(std::upper_bound(l.ranks.begin(), l.ranks.end(), p.rank), p.rank);
      return;
    }
    pending.push_back({OutputLine{p.stream, p.mesh, {p.rank}, std::move(text)}, Clock::now() + w});
  }

  void take(Pipe& p, const char* data, std::size_t n) {
    p.partial.append(data, n);
    std::size_t start = 0;
    for (;;) {
      const std::size_t nl = p.partial.find('\n', start);
      if (nl == std::string::npos) break;
      on_line(p, p.partial.substr(start, nl - start));
      start = nl + 1;
    }
    p.partial.erase(0, start);
    while (p.partial.size() >= kMaxLine) {  // bounded memory for a line with no end
      on_line(p, p.partial.substr(0, kMaxLine));
      p.partial.erase(0, kMaxLine);
    }
  }

  /// Reads what `p` has now; false at end of file (what is left is printed).
  bool read_some(Pipe& p) {
    char buf[16384];
    for (;;) {
      const ssize_t n = ::read(p.fd, buf, sizeof(buf));
      if (n > 0) {
        take(p, buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (!p.partial.empty()) on_line(p, std::move(p.partial));
      ::close(p.fd);
      return false;
    }
  }

  void read_all() {
    std::erase_if(pipes, [&](Pipe& p) { return !read_some(p); });
  }

  void expire(Clock::time_point now) {
    while (!pending.empty() && pending.front().deadline <= now) {
      emit(pending.front().line);
      pending.pop_front();
    }
  }

  void run() {
    for (;;) {
      std::uint64_t asked = 0;
      bool stop = false;
      {
        std::lock_guard lock(mu);
        for (auto& p : added) pipes.push_back(std::move(p));
        added.clear();
        asked = flush_asked;
        stop = stopping;
      }
      if (stop || asked != flush_done_seen) {
        read_all();
        expire(Clock::time_point::max());
        {
          std::lock_guard lock(mu);
          flush_done = asked;
        }
        flush_done_seen = asked;
        cv.notify_all();
        if (stop) {
          for (auto& p : pipes) ::close(p.fd);
          return;
        }
      }
      std::vector<pollfd> fds;
      fds.push_back({wake[0], POLLIN, 0});
      for (const auto& p : pipes) fds.push_back({p.fd, POLLIN, 0});
      int timeout = -1;
      if (!pending.empty()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            pending.front().deadline - Clock::now());
        timeout = static_cast<int>(std::max<std::int64_t>(0, left.count() + 1));
      }
      const int n = ::poll(fds.data(), fds.size(), timeout);
      if (n > 0) {
        if ((fds[0].revents & POLLIN) != 0) {
          char drain[64];
          while (::read(wake[0], drain, sizeof(drain)) > 0) {
          }
        }
        std::vector<Pipe> kept;
        for (std::size_t i = 0; i < pipes.size(); ++i) {
          const bool ready = (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
          if (!ready || read_some(pipes[i])) kept.push_back(std::move(pipes[i]));
        }
        pipes = std::move(kept);
      }
      expire(Clock::now());
    }
  }

  void poke() const {
    const char c = 1;
    (void)!::write(wake[1], &c, 1);
  }

  std::uint64_t flush_done_seen = 0;
};

OutputForwarder::OutputForwarder(OutputOptions options) : state_(std::make_unique<State>()) {
  state_->options = std::move(options);
  if (::pipe2(state_->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
    throw std::runtime_error("cannot create the output forwarder's wake-up pipe");
  }
}

void OutputForwarder::start() {
  // The thread starts with the first pipe or line: a worker that starts no proc has none.
  std::call_once(state_->started_once, [this] {
    thread_ = std::thread([s = state_.get()] { s->run(); });
    state_->started.store(true);
  });
}

OutputForwarder::~OutputForwarder() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->poke();
  if (thread_.joinable()) thread_.join();
  ::close(state_->wake[0]);
  ::close(state_->wake[1]);
}

void OutputForwarder::add(int fd, int stream, std::string mesh, std::size_t rank) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  {
    std::lock_guard lock(state_->mu);
    state_->added.push_back(State::Pipe{fd, stream, std::move(mesh), rank, {}});
  }
  start();
  state_->poke();
}

void OutputForwarder::print(const OutputLine& line) {
  FILE* out = line.stream == 2 ? stderr : stdout;
  const std::string s = line.to_string() + "\n";
  std::fwrite(s.data(), 1, s.size(), out);
  std::fflush(out);
}

void OutputForwarder::emit(const OutputLine& line) {
  start();  // a line held for its window is printed by the thread
  state_->keep(line);
  state_->emit(line);
}

std::vector<KeptLine> OutputForwarder::kept() const {
  std::lock_guard lock(state_->mu);
  return {state_->kept_lines.begin(), state_->kept_lines.end()};
}

void OutputForwarder::flush() {
  if (!state_->started.load()) return;  // no pipe was added, no line emitted
  std::unique_lock lock(state_->mu);
  const std::uint64_t ticket = ++state_->flush_asked;
  state_->poke();
  state_->cv.wait(lock, [&] { return state_->flush_done >= ticket; });
}

std::vector<std::string> OutputForwarder::recent_stderr(const std::string& mesh,
                                                        std::size_t rank) const {
  std::lock_guard lock(state_->mu);
  auto it = state_->recent.find({mesh, rank});
  if (it == state_->recent.end()) return {};
  return {it->second.begin(), it->second.end()};
}

void OutputForwarder::set_window(std::chrono::milliseconds window) {
  {
    std::lock_guard lock(state_->mu);
    state_->options.window = window;
  }
  flush();  // what waited under the old window goes out now
}

}  // namespace baton
