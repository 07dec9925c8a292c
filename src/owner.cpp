#include "overlay/owner.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>

namespace overlay {

std::int64_t boot_offset_ticks() {
  static const std::int64_t offset = [] {
    std::ifstream in("/proc/self/timens_offsets");
    std::string clock;
    long long secs = 0, nanos = 0;
    while (in >> clock >> secs >> nanos)
      if (clock == "boottime") {
        long hz = ::sysconf(_SC_CLK_TCK);
        if (hz <= 0) hz = 100;
        return static_cast<std::int64_t>(secs * hz + nanos * hz / 1000000000LL);
      }
    return std::int64_t{0};  // no time namespace (or a kernel without them)
  }();
  return offset;
}

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
  // In a time namespace the kernel shows start times shifted by the reader's boottime offset: taken
  // off, every reader records and compares the one time the host's namespace shows.
  auto host = static_cast<std::int64_t>(start_ticks) - boot_offset_ticks();
  if (host > 0) start_ticks = static_cast<std::uint64_t>(host);
  return true;
}

std::optional<std::uint64_t> process_start_ticks(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  pid_t ppid = 0;
  std::uint64_t ticks = 0;
  if (!std::getline(in, line) || !parse_proc_stat(line, ppid, ticks)) return std::nullopt;
  // Exited, not yet reaped (a PID 1 that never reaps, a parent that has not waited): runs nothing.
  auto close = line.rfind(')');
  if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z') return std::nullopt;
  return ticks;
}

namespace {

// The kernel's initial PID namespace has this fixed inode (PROC_PID_INIT_INO): from it, every
// process of the machine can be seen.
constexpr std::uint64_t kInitPidNs = 0xEFFFFFFCU;

// The last number of /proc/PID/status's NSpid line: the process's PID in its own namespace.
std::optional<pid_t> own_ns_pid(const std::string& proc_dir, bool& nested) {
  std::ifstream in(proc_dir + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("NSpid:")) continue;
    std::istringstream words(line.substr(6));
    long v = 0, last = -1;
    int n = 0;
    while (words >> v) last = v, ++n;
    nested = n > 1;
    if (last <= 0) return std::nullopt;
    return static_cast<pid_t>(last);
  }
  return std::nullopt;
}

// The namespace inode a /proc/PID/ns/pid link names ("pid:[4026531836]"), 0 when unreadable
// (another account's process, unless we are root).
std::uint64_t ns_of(const std::string& proc_dir) {
  struct stat st {};
  return ::stat((proc_dir + "/ns/pid").c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_ino) : 0;
}

// The owner in PID namespace o.pid_ns, looked for among every process /proc shows.
Liveness liveness_in_other_ns(const Owner& o) {
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return Liveness::unseen;
  bool ns_seen = false, maybe = false;
  std::optional<Liveness> found;
  while (const dirent* ent = ::readdir(d)) {
    if (ent->d_name[0] < '1' || ent->d_name[0] > '9') continue;
    std::string dir = std::string("/proc/") + ent->d_name;
    bool nested = false;
    auto pid = own_ns_pid(dir, nested);
    if (!pid) continue;
    std::uint64_t ns = ns_of(dir);
    if (ns == 0) {  // its namespace cannot be read: if it has the owner's number there, it may be it
      maybe = maybe || (*pid == o.pid && nested);
      continue;
    }
    if (ns != o.pid_ns) continue;
    ns_seen = true;
    if (*pid != o.pid) continue;
    std::ifstream in(dir + "/stat");
    std::string line;
    pid_t ppid = 0;
    std::uint64_t ticks = 0;
    if (!std::getline(in, line) || !parse_proc_stat(line, ppid, ticks)) continue;  // it just ended
    found = o.start_ticks == 0 || ticks == o.start_ticks ? Liveness::alive : Liveness::gone;
    break;
  }
  ::closedir(d);
  if (found) return *found;
  if (maybe) return Liveness::unseen;
  // Seen (a namespace below ours: all of it is visible) or, from the initial one, none left.
  return ns_seen || this_pid_ns() == kInitPidNs ? Liveness::gone : Liveness::unseen;
}

}  // namespace

const char* to_string(Liveness l) {
  switch (l) {
    case Liveness::alive:
      return "alive";
    case Liveness::gone:
      return "gone";
    case Liveness::unseen:
      return "unseen";
  }
  return "?";
}

std::uint64_t this_pid_ns() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<std::uint64_t>(st.st_ino) : 0;
}

std::optional<Owner> local_owner(pid_t pid) {
  auto ticks = process_start_ticks(pid);
  if (!ticks) return std::nullopt;
  Owner o;
  o.pid = pid;
  o.start_ticks = *ticks;
  o.pid_ns = this_pid_ns();
  return o;
}

Liveness local_owner_liveness(const Owner& o) {
  if (o.pid <= 0) return Liveness::gone;
  if (o.pid_ns != 0 && o.pid_ns != this_pid_ns()) return liveness_in_other_ns(o);
  auto ticks = process_start_ticks(o.pid);
  if (!ticks) {
    // No /proc to read: trust kill(0). With /proc, a PID there without a start time is a zombie.
    bool proc = ::access("/proc/self/stat", F_OK) == 0;
    return !proc && (::kill(o.pid, 0) == 0 || errno == EPERM) ? Liveness::alive : Liveness::gone;
  }
  return o.start_ticks == 0 || *ticks == o.start_ticks ? Liveness::alive : Liveness::gone;
}

std::string this_host() {
  struct utsname u {};
  return ::uname(&u) == 0 ? std::string(u.nodename) : std::string();
}

std::string owner_text(const Owner& o) {
  std::string t = std::to_string(o.pid) + ":" + std::to_string(o.start_ticks) +
                  (o.pid_ns ? "~" + std::to_string(o.pid_ns) : "") + "@" + o.host;
  return o.lease.empty() ? t : t + "/" + lease_text(o.lease);
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
    auto tilde = ticks.find('~');
    if (tilde != std::string::npos) {
      std::string ns = ticks.substr(tilde + 1);
      o.pid_ns = std::stoull(ns, &used);
      if (used != ns.size() || ns.empty() || !std::isdigit(static_cast<unsigned char>(ns[0]))) return std::nullopt;
      ticks.resize(tilde);
    }
    o.start_ticks = std::stoull(ticks, &used);
    if (used != ticks.size() || ticks.empty() || !std::isdigit(static_cast<unsigned char>(ticks[0])))
      return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::string rest = text.substr(at + 1);
  auto slash = rest.find('/');
  o.host = rest.substr(0, slash);
  if (o.host.empty()) return std::nullopt;
  if (slash != std::string::npos) {
    auto lease = parse_lease_text(rest.substr(slash + 1));
    if (!lease) return std::nullopt;
    o.lease = *lease;
  }
  return o;
}

void to_json(nlohmann::json& j, const Owner& o) {
  j = {{"pid", o.pid}, {"start_ticks", o.start_ticks}};
  if (o.pid_ns != 0) j["pid_ns"] = o.pid_ns;
  if (!o.host.empty()) j["host"] = o.host;
  if (!o.lease.empty()) j[lease_key(o.lease)] = o.lease.id;
}

}  // namespace overlay
