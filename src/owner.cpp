#include "overlay/owner.hpp"

#include <signal.h>
#include <sys/utsname.h>

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

bool local_owner_alive(const Owner& o) {
  if (o.pid <= 0) return false;
  auto ticks = process_start_ticks(o.pid);
  if (!ticks) return ::kill(o.pid, 0) == 0 || errno == EPERM;  // no /proc: trust kill(0)
  return o.start_ticks == 0 || *ticks == o.start_ticks;
}

std::string this_host() {
  struct utsname u {};
  return ::uname(&u) == 0 ? std::string(u.nodename) : std::string();
}

std::string owner_text(const Owner& o) {
  std::string t = std::to_string(o.pid) + ":" + std::to_string(o.start_ticks) + "@" + o.host;
  return o.slurm_job.empty() ? t : t + "/" + o.slurm_job;
}

std::optional<Owner> parse_owner_text(const std::string& text) {
  auto colon = text.find(':'), at = text.find('@');
  if (colon == std::string::npos || at == std::string::npos || at < colon) return std::nullopt;
  Owner o;
  try {
    std::size_t used = 0;
    long pid = std::stol(text.substr(0, colon), &used);
    if (used != colon || pid <= 0 || pid > (1L << 30)) return std::nullopt;
    o.pid = static_cast<pid_t>(pid);
    std::string ticks = text.substr(colon + 1, at - colon - 1);
    o.start_ticks = std::stoull(ticks, &used);
    if (used != ticks.size()) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::string rest = text.substr(at + 1);
  auto slash = rest.find('/');
  o.host = rest.substr(0, slash);
  if (slash != std::string::npos) o.slurm_job = rest.substr(slash + 1);
  if (o.host.empty() || (slash != std::string::npos && o.slurm_job.empty())) return std::nullopt;
  return o;
}

}  // namespace overlay
