#include "bench/child_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace kvc::bench {

uint16_t free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  uint16_t port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

namespace {

// utime and stime of one process, in clock ticks (fields 14 and 15 of /proc/PID/stat, counted
// after the parenthesised command name, which may contain spaces).
std::pair<long long, long long> cpu_ticks(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) return {0, 0};
  std::istringstream rest(stat.substr(close_paren + 2));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return {utime, stime};
}

}  // namespace

ProcessCpu process_cpu(pid_t pid) {
  if (pid <= 0) return {};
  long long user = 0, system = 0;
  auto add = [&](pid_t p) {
    const auto [u, s] = cpu_ticks(p);
    user += u;
    system += s;
  };
  add(pid);
  std::ifstream children("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) +
                         "/children");
  for (pid_t child; children >> child;)
    add(child);
  const auto tck = static_cast<double>(sysconf(_SC_CLK_TCK));
  return {static_cast<double>(user) / tck, static_cast<double>(system) / tck};
}

std::string file_tail(const std::string& path, size_t bytes) {
  std::ifstream f(path);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

ChildProcess::~ChildProcess() {
  stop();
}

Result<std::unique_ptr<ChildProcess>> ChildProcess::start(const std::vector<std::string>& argv,
                                                          const std::string& log_file) {
  if (argv.empty() || access(argv[0].c_str(), X_OK) != 0) {
    return Error{(argv.empty() ? std::string("(nothing)") : argv[0]) + " is not installed"};
  }
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::unique_ptr<ChildProcess> p(new ChildProcess());
  std::fflush(nullptr);  // or the child's stdio would write the parent's pending output again
  const pid_t parent = getpid();
  p->pid_ = fork();
  if (p->pid_ < 0) return Error{"fork failed"};
  if (p->pid_ == 0) {
    // Only async-signal-safe calls from here: the parent has other threads.
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // a killed parent takes its helpers along
    if (getppid() != parent) _exit(127);
    const int log = open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log >= 0) {
      dup2(log, STDOUT_FILENO);
      dup2(log, STDERR_FILENO);
    }
    // The parent's sockets (listeners included) and files stay with the parent.
    close_range(3, ~0U, 0);
    execv(args[0], args.data());
    _exit(127);
  }
  return p;
}

bool ChildProcess::exited() {
  if (pid_ <= 0) return true;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return true;
  }
  return false;
}

void ChildProcess::stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  for (int i = 0; i < 100 && !exited(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
}

}  // namespace kvc::bench
