#include "overlay/owner.hpp"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>

namespace overlay {

bool parse_proc_stat(const std::string& stat, pid_t& ppid, std::uint64_t& start_ticks) {
  auto close = stat.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  try {
    for (int i = 3; i <= 22; ++i) {
      if (!(rest >> field)) return false;
      if (i == 4) ppid = static_cast<pid_t>(std::stol(field));
    }
    start_ticks = std::stoull(field);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

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
