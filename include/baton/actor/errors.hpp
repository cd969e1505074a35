#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

namespace baton {

/// A remote endpoint threw: carries the actor that threw and the exception's message.
class ActorError : public std::runtime_error {
 public:
  /// `where`, if given, is the actor's place in a mesh ("rank 2 {gpus: 2}").
  ActorError(std::string actor, std::string endpoint, std::string message, std::string where = {})
      : std::runtime_error(actor + (where.empty() ? "" : " (" + where + ")") + " failed in " +
                           endpoint + ": " + message),
        actor_(std::move(actor)),
        endpoint_(std::move(endpoint)),
        remote_message_(std::move(message)),
        where_(std::move(where)) {}

  const std::string& actor() const { return actor_; }
  /// The actor's rank and coordinates in the mesh it was called through, if it was.
  const std::string& where() const { return where_; }
  const std::string& endpoint() const { return endpoint_; }
  const std::string& remote_message() const { return remote_message_; }

 private:
  std::string actor_;
  std::string endpoint_;
  std::string remote_message_;
  std::string where_;
};

/// The actor that would have answered failed or stopped before it replied (or its process
/// died).
class SupervisionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  /// `where`, if given, is the actor's place in a mesh ("rank 2 {gpus: 2}"); what() starts
  /// with it.
  SupervisionError(const std::string& message, std::string where)
      : std::runtime_error(where.empty() ? message : where + ": " + message),
        where_(std::move(where)) {}
  /// The actor's rank and coordinates in the mesh it was called through, if it was.
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

/// A message could not be delivered; `reason()` says why.
class UndeliverableError : public std::runtime_error {
 public:
  enum class Reason { unknown_actor, actor_stopped, actor_failed, link_lost, timeout };
  /// `where`, if given, is the receiver's place in a mesh ("rank 2 {gpus: 2}"); what() starts
  /// with it.
  UndeliverableError(Reason reason, const std::string& what, std::string where = {})
      : std::runtime_error(where.empty() ? what : where + ": " + what),
        reason_(reason),
        where_(std::move(where)) {}
  Reason reason() const { return reason_; }
  /// The receiver's rank and coordinates in the mesh it was called through, if it was.
  const std::string& where() const { return where_; }

 private:
  Reason reason_;
  std::string where_;
};

/// `Future::get(timeout)` ran out of time; the future stays usable.
class TimeoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A wrong use of the API (an undeclared endpoint, a broken future, a stopped proc).
class UsageError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

const char* to_string(UndeliverableError::Reason reason);

}  // namespace baton
