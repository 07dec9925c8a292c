#include "overlay/liveness.hpp"

#include "overlay/lease.hpp"
#include "overlay/process.hpp"

namespace overlay {

Liveness owner_liveness(const Owner& o) {
  // A fleet step's entries live as long as its lease, on every node alike: the coordinator's own
  // host (a batch script runs on the job's first node) must not revert while the others keep it.
  if (!o.lease.empty()) {
    LeaseState s = lease_state(o.lease);
    if (s != LeaseState::unknown) return s == LeaseState::held ? Liveness::alive : Liveness::gone;
  }
  if (o.host.empty() || o.host == this_host()) return local_owner_liveness(o);
  return Liveness::unseen;  // another host, and nothing to ask: never revert on a guess
}

bool owner_alive(const Owner& o) { return owner_liveness(o) != Liveness::gone; }

std::string describe_owner(const Owner& o) {
  std::string pid = "pid " + std::to_string(o.pid);
  if (o.pid_ns != 0 && o.pid_ns != this_pid_ns()) pid += " of PID namespace pid:[" + std::to_string(o.pid_ns) + "]";
  if (o.host.empty()) return pid;
  return "coordinator " + pid + " on " + o.host + (o.lease.empty() ? "" : " (" + describe_lease(o.lease) + ")");
}

}  // namespace overlay
