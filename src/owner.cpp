#include "overlay/owner.hpp"

#include "overlay/process_scan.hpp"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace overlay {

std::optional<std::uint64_t> process_start_ticks(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  pid_t ppid = 0;
  std::uint64_t ticks = 0;
  if (!std::getline(in, line) || !parse_proc_stat(line, ppid, ticks)) return std::nullopt;
  return ticks;
}

bool owner_alive(const Owner& o) {
  if (o.pid <= 0) return false;
  auto ticks = process_start_ticks(o.pid);
  if (!ticks) return ::kill(o.pid, 0) == 0 || errno == EPERM;  // no /proc: trust kill(0)
  return o.start_ticks == 0 || *ticks == o.start_ticks;
}

}  // namespace overlay
