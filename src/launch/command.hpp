#pragma once

// Internal: running the commands a job drives (ssh, srun, squeue, scancel) as child processes,
// with their output piped back.

#include <sys/types.h>

#include <string>
#include <vector>

namespace baton::internal {

/// What a finished command said and how it ended.
struct Ran {
  int status = -1;  // as waitpid gives it
  std::string out;
  std::string err;
};

/// Starts `argv` (looked up on PATH) with `in` as its standard input (-1: /dev/null), its
/// stdout piped to `*out_fd` and, if `err_fd` is given, its stderr to `*err_fd`. With
/// `own_group`, in a process group of its own (a terminal's ^C reaches only this program,
/// which ends the child itself). `what` names the package to install if it is missing.
pid_t start_command(const std::vector<std::string>& argv, int in, int* out_fd, int* err_fd,
                    const std::string& what, bool own_group = false);
/// Runs `argv` to its end (its output is small) and says what it printed.
Ran run_command(const std::vector<std::string>& argv, const std::string& what, int in = -1);
/// The first line of what `r` printed on stderr, else on stdout, else "(no message)".
std::string said(const Ran& r);
/// Whether `r` exited with status 0.
bool succeeded(const Ran& r);

/// A pipe whose read end gives `text` (small enough for the pipe's buffer); the caller closes
/// the fd returned.
int text_input(const std::string& text);
/// The whole of file `path` (empty if it cannot be read).
std::string file_text(const std::string& path);

/// The baton-host to run on a job's hosts: `given` if not empty, else the one beside this
/// program, else the one on PATH; throws UsageError naming `who` and `option` if none.
std::string local_agent(const std::string& given, const std::string& who,
                        const std::string& option);

}  // namespace baton::internal
