#include "log/log.hpp"

#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "baton/wire/ids.hpp"

namespace baton::detail {

constinit thread_local const ActorId* t_log_actor = nullptr;

namespace {

/// The one logger: stderr, the line as given, flushed after each. Never destroyed, so a line
/// logged while the process exits (by another thread, or a static's destructor) still goes out.
/// Not in spdlog's registry: the program's own spdlog settings do not reach it.
spdlog::logger& logger() {
  static spdlog::logger* const out = [] {
    auto* l = new spdlog::logger("baton", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("%v");
    l->set_level(spdlog::level::trace);  // the level is checked before a line is made
    l->flush_on(spdlog::level::trace);
    return l;
  }();
  return *out;
}

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::debug:
      return spdlog::level::debug;
    case LogLevel::info:
      return spdlog::level::info;
    case LogLevel::warn:
      return spdlog::level::warn;
    case LogLevel::error:
      return spdlog::level::err;
    case LogLevel::off:
      break;
  }
  return spdlog::level::off;
}

struct ProcName {
  std::mutex mu;
  std::string name;
};

ProcName& proc_name() {
  static ProcName* const p = [] {
    auto* n = new ProcName;
    n->name = "pid " + std::to_string(::getpid());
    return n;
  }();
  return *p;
}

/// Writes one line, whatever the level.
void emit(LogLevel level, std::string_view message) {
  std::string proc;
  {
    ProcName& p = proc_name();
    std::lock_guard lock(p.mu);
    proc = p.name;
  }
  std::string line;
  line.reserve(proc.size() + message.size() + 48);
  line += "[baton ";
  line += proc;
  if (const ActorId* a = t_log_actor) {
    line += ' ';
    // An actor of another proc in this process (tests run several) is named in full.
    if (a->proc.name != proc) {
      line += a->proc.name;
      line += '/';
    }
    line += a->name;
    line += '[';
    line += std::to_string(a->index);
    line += ']';
  }
  line += "] ";
  line += log_level_name(level);
  line += ": ";
  line += message;
  logger().log(to_spdlog(level), spdlog::string_view_t(line.data(), line.size()));
}

constexpr const char* kLogVar = "BATON_LOG";

/// BATON_LOG's level; a value that names none is warned about (once: this runs once) and
/// taken as info.
LogLevel level_from_env() {
  const char* value = std::getenv(kLogVar);
  if (value == nullptr || *value == '\0') return LogLevel::info;
  if (auto level = parse_log_level(value)) return *level;
  emit(LogLevel::warn, fmt::format("{}={} is not one of debug, info, warn, error, off; logging at "
                                   "info",
                                   kLogVar, value));
  return LogLevel::info;
}

std::atomic<LogLevel>& level_ref() {
  static std::atomic<LogLevel> level{level_from_env()};
  return level;
}

}  // namespace

LogLevel log_level() noexcept {
  return level_ref().load(std::memory_order_relaxed);
}

bool log_enabled(LogLevel level) noexcept {
  return level != LogLevel::off && level >= log_level();
}

void set_log_level(LogLevel level) noexcept {
  level_ref().store(level, std::memory_order_relaxed);
}

std::string_view log_level_name(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::debug:
      return "debug";
    case LogLevel::info:
      return "info";
    case LogLevel::warn:
      return "warn";
    case LogLevel::error:
      return "error";
    case LogLevel::off:
      break;
  }
  return "off";
}

std::optional<LogLevel> parse_log_level(std::string_view text) noexcept {
  for (auto level :
       {LogLevel::debug, LogLevel::info, LogLevel::warn, LogLevel::error, LogLevel::off}) {
    const std::string_view name = log_level_name(level);
    if (std::equal(text.begin(), text.end(), name.begin(), name.end(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == b;
        })) {
      return level;
    }
  }
  return std::nullopt;
}

void set_log_proc(std::string name) {
  {
    ProcName& p = proc_name();
    std::lock_guard lock(p.mu);
    p.name = std::move(name);
  }
  // BATON_LOG is read now, so a warning about its value names the proc.
  (void)level_ref();
}

void log_write(LogLevel level, std::string_view message) {
  if (!log_enabled(level)) return;
  emit(level, message);
}

}  // namespace baton::detail
