#include "overlay/owner.hpp"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>

namespace overlay {

std::optional<std::uint64_t> process_start_ticks(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  // The command name (field 2) may hold spaces and parentheses: fields restart after the last ')'.
  auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return std::nullopt;
  }
  try {
    return std::stoull(field);
  } catch (...) {
    return std::nullopt;
  }
}

bool owner_alive(const Owner& o) {
  if (o.pid <= 0) return false;
  auto ticks = process_start_ticks(o.pid);
  if (!ticks) return ::kill(o.pid, 0) == 0 || errno == EPERM;  // no /proc: trust kill(0)
  return o.start_ticks == 0 || *ticks == o.start_ticks;
}

}  // namespace overlay
