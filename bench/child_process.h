// A helper program run by a command (Debian's Prometheus for the demo, nginx for the router
// benchmark): started with its output in a log file, stopped with SIGTERM (then SIGKILL) on
// destruction.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/temp_dir.h"

namespace kvc::bench {

// A loopback TCP port that was free a moment ago (0 when none could be bound).
uint16_t free_loopback_port();

// CPU seconds used so far by process `pid` and its direct children, in user space and in the
// kernel (Linux /proc, in clock ticks: 10 ms; 0 when unreadable).
struct ProcessCpu {
  double user_s = 0;
  double system_s = 0;
  double total() const { return user_s + system_s; }
};
ProcessCpu process_cpu(pid_t pid);

// The last `bytes` of a file: a helper's log, for an error message (the folder may be gone after).
std::string file_tail(const std::string& path, size_t bytes = 400);

class ChildProcess {
 public:
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Runs argv[0] (a path) with argv, stdout and stderr appended to `log_file`. Fails when the
  // binary is not executable or fork fails.
  static Result<std::unique_ptr<ChildProcess>> start(const std::vector<std::string>& argv,
                                                     const std::string& log_file);
  // True once the process has exited (reaped here).
  bool exited();
  pid_t pid() const { return pid_; }
  // SIGTERM, up to 5 s for it to exit, then SIGKILL. Idempotent.
  void stop();

 private:
  ChildProcess() = default;
  pid_t pid_ = -1;
};

}  // namespace kvc::bench
