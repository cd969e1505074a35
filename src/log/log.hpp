#pragma once

// Internal: the library's log. Every line goes to stderr through spdlog, flushed at once (an
// error logged just before _Exit is never lost), and names the process's proc and, when an
// actor's code logs it, that actor:
//
//   [baton procs0.3 trainer[2]] warn: reply to ctl/client[0] lost: ...
//   [baton ctl] error: a failure that nothing handled stops this program: ...
//
// The level comes from BATON_LOG (debug|info|warn|error|off; info if unset), read once; a value
// that is none of these is warned about once and taken as info. A level's lines show when it is
// at or above the chosen one.
//
//   detail::log_warn("proc {} cannot reach proc {}: {}", from, to, e.what());
//   if (detail::log_enabled(detail::LogLevel::debug)) detail::log_debug("...", costly());
//
// Formatting is fmt's ("{}"), done only for a level that is enabled; spdlog stays out of this
// header, so a file that logs does not compile it.

#include <fmt/core.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace baton {
struct ActorId;
}

namespace baton::detail {

enum class LogLevel : std::uint8_t { debug, info, warn, error, off };

/// The level lines must have to be written (BATON_LOG's, or set_log_level's).
LogLevel log_level() noexcept;
/// Whether a line at `level` would be written: check it before computing something costly.
bool log_enabled(LogLevel level) noexcept;
/// Overrides BATON_LOG for this process (the workers it starts from now on get it too).
void set_log_level(LogLevel level) noexcept;
/// "debug", "info", "warn", "error" or "off".
std::string_view log_level_name(LogLevel level) noexcept;
/// A BATON_LOG value's level; nullopt if it names none.
std::optional<LogLevel> parse_log_level(std::string_view text) noexcept;

/// The name every line gives this process: its proc's ("ctl", "procs0.3"); "pid <pid>" until
/// the runtime sets it.
void set_log_proc(std::string name);

/// The actor whose code this thread runs, named by the lines it logs; null outside actors.
/// Only a thread-local pointer: the actor layer sets it around each batch a cell runs.
extern constinit thread_local const ActorId* t_log_actor;

inline void set_log_actor(const ActorId* id) noexcept {
  t_log_actor = id;
}
inline const ActorId* log_actor() noexcept {
  return t_log_actor;
}

/// Names `id` in the lines this thread logs while it lives (`id` must outlive it), then puts
/// back what was there before.
class LogActorScope {
 public:
  explicit LogActorScope(const ActorId* id) noexcept : prev_(t_log_actor) { t_log_actor = id; }
  ~LogActorScope() { t_log_actor = prev_; }
  LogActorScope(const LogActorScope&) = delete;
  LogActorScope& operator=(const LogActorScope&) = delete;

 private:
  const ActorId* prev_;
};

/// Writes one line at `level` (if enabled), with this process's and thread's prefix; `message`
/// has no prefix and no trailing newline (it may span lines).
void log_write(LogLevel level, std::string_view message);

template <class... A>
void log_at(LogLevel level, fmt::format_string<A...> format, A&&... args) {
  if (!log_enabled(level)) return;
  log_write(level, fmt::format(format, std::forward<A>(args)...));
}

template <class... A>
void log_debug(fmt::format_string<A...> format, A&&... args) {
  log_at(LogLevel::debug, format, std::forward<A>(args)...);
}
template <class... A>
void log_info(fmt::format_string<A...> format, A&&... args) {
  log_at(LogLevel::info, format, std::forward<A>(args)...);
}
template <class... A>
void log_warn(fmt::format_string<A...> format, A&&... args) {
  log_at(LogLevel::warn, format, std::forward<A>(args)...);
}
template <class... A>
void log_error(fmt::format_string<A...> format, A&&... args) {
  log_at(LogLevel::error, format, std::forward<A>(args)...);
}

}  // namespace baton::detail
