#pragma once
// Whether an entry's owner is still alive, wherever it runs: a process on this machine (its PID
// and start time), or a fleet step's coordinator on another host (its lease, overlay/lease.hpp).
#include <optional>
#include <string>

#include "overlay/owner.hpp"

namespace overlay {

// What can be told of the owner from here. An owner with a lease (a fleet step's coordinator)
// lives while the lease holds, whichever host asks; where its engine does not answer, or no
// lease is recorded, an owner on this machine is judged by its PID and start time in its PID
// namespace, and one on another host is `unseen`.
Liveness owner_liveness(const Owner& o);

// True when the owner may still be at work (alive, or unseen: nothing is reverted on a guess).
bool owner_alive(const Owner& o);

// "pid 123", "pid 2 of PID namespace pid:[4026532291]" (not ours) or "coordinator pid 123 on
// login1 (Slurm job 42)", for the lines that name an owner.
std::string describe_owner(const Owner& o);

}  // namespace overlay
