#include "overlay/owner.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "overlay/liveness.hpp"
#include "overlay/slurm.hpp"

using namespace overlay;

namespace {
// As in the CLI, Slurm's leases are the first engine's in every test of this binary, whichever
// runs first: a bare job id in an owner text is one of its jobs.
class SlurmFirst : public ::testing::Environment {
  void SetUp() override { add_lease_engine(slurm_leases()); }
};
[[maybe_unused]] const ::testing::Environment* const kSlurmFirst = ::testing::AddGlobalTestEnvironment(new SlurmFirst);
}  // namespace

TEST(Owner, SelfIsAliveWithStartTime) {
  auto ticks = process_start_ticks(::getpid());
  ASSERT_TRUE(ticks);
  EXPECT_TRUE(owner_alive({::getpid(), *ticks, {}, {}}));
  EXPECT_FALSE(owner_alive({::getpid(), *ticks + 1, {}, {}}));  // same PID, another process
}

TEST(Owner, DeadProcessIsNotAlive) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  auto ticks = process_start_ticks(pid);
  ::waitpid(pid, nullptr, 0);
  EXPECT_FALSE(owner_alive({pid, ticks.value_or(1), {}, {}}));
  EXPECT_FALSE(process_start_ticks(pid));
}

TEST(Owner, TextRoundTripsAndRejectsMalformed) {
  ASSERT_EQ(lease_engines().front(), &slurm_leases());
  Owner o{4242, 99, "login1", {"slurm", "77"}};
  EXPECT_EQ(owner_text(o), "4242:99@login1/77");  // the form every version passed to its nodes
  auto back = parse_owner_text(owner_text(o));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->pid, 4242);
  EXPECT_EQ(back->start_ticks, 99u);
  EXPECT_EQ(back->host, "login1");
  EXPECT_EQ(back->lease, (Lease{"slurm", "77"}));
  EXPECT_TRUE(parse_owner_text("12:3@h")->lease.empty());
  // Another engine's lease (one this binary may lack) names its engine, and comes back whole.
  o.lease = {"ray", "raysubmit_9:x"};
  EXPECT_EQ(owner_text(o), "4242:99@login1/ray:raysubmit_9:x");
  EXPECT_EQ(parse_owner_text(owner_text(o))->lease, o.lease);
  for (const char* bad : {"", "12", "12:3", "x:3@h", "12:y@h", "12:3@", "12:3@h/", "0:3@h", "12@h:3", "12:3~@h",
                          "12:3~x@h", "12:~5@h", "12:3~-5@h", "12:3@h/Ray:1", "12:3@h/ray:", "12:3@h/:1"})
    EXPECT_FALSE(parse_owner_text(bad)) << bad;
  o.pid_ns = 4026532175, o.lease = {"slurm", "77"};
  EXPECT_EQ(owner_text(o), "4242:99~4026532175@login1/77");
  EXPECT_EQ(parse_owner_text(owner_text(o))->pid_ns, 4026532175u);
}

// The PID namespace the number was recorded in decides where it is looked up.
TEST(Owner, ANumberOfAnotherPidNamespaceIsNotLookedUpInOurs) {
  auto me = local_owner(::getpid());
  ASSERT_TRUE(me);
  EXPECT_EQ(me->pid_ns, this_pid_ns());
  EXPECT_EQ(local_owner_liveness(*me), Liveness::alive);
  Owner other = *me;
  other.pid_ns = 12345;  // no process is in a namespace of this inode
  // From the initial namespace every process is seen: none there, so gone; from a container's,
  // that namespace may just be out of sight.
  EXPECT_EQ(local_owner_liveness(other), this_pid_ns() == 0xEFFFFFFCU ? Liveness::gone : Liveness::unseen);
  EXPECT_NE(describe_owner(other).find("of PID namespace pid:[12345]"), std::string::npos) << describe_owner(other);
  EXPECT_EQ(describe_owner(*me), "pid " + std::to_string(::getpid()));
}

// A coordinator on another host is judged by its Slurm job: a squeue on PATH says what Slurm would.
class RemoteOwner : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("owner-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    old_path_ = std::getenv("PATH") ? std::getenv("PATH") : "";
    ::setenv("PATH", (dir_.string() + ":" + old_path_).c_str(), 1);
  }
  void TearDown() override {
    ::setenv("PATH", old_path_.c_str(), 1);
    std::filesystem::remove_all(dir_);
  }
  void squeue(const std::string& body) {
    std::ofstream(dir_ / "squeue") << "#!/bin/sh\n" << body << "\n";
    std::filesystem::permissions(dir_ / "squeue", std::filesystem::perms::owner_all);
  }
  std::filesystem::path dir_;
  std::string old_path_;
};

TEST_F(RemoteOwner, AliveWhileItsJobRunsGoneWhenItEnded) {
  Owner o{1, 1, "another-host-" + std::to_string(::getpid()), {"slurm", "77"}};
  squeue("echo RUNNING");
  EXPECT_TRUE(owner_alive(o));
  squeue("echo COMPLETING");
  EXPECT_TRUE(owner_alive(o));
  squeue("echo CANCELLED");
  EXPECT_FALSE(owner_alive(o));
  squeue("true");  // no line: the controller no longer lists it
  EXPECT_FALSE(owner_alive(o));
  squeue("echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1");
  EXPECT_FALSE(owner_alive(o));
  EXPECT_EQ(describe_owner(o), "coordinator pid 1 on " + o.host + " (Slurm job 77)");
}

TEST_F(RemoteOwner, AliveWhenSlurmCannotBeAsked) {
  Owner o{1, 1, "another-host-" + std::to_string(::getpid()), {"slurm", "77"}};
  squeue("echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1");
  EXPECT_TRUE(owner_alive(o));  // nothing is reverted on a guess
  o.lease = {};
  squeue("echo CANCELLED");
  EXPECT_TRUE(owner_alive(o));  // no job recorded: another host's PID says nothing here
  o = Owner{::getpid(), process_start_ticks(::getpid()).value_or(0), this_host(), {"slurm", "77"}};
  squeue("exit 1");
  EXPECT_TRUE(owner_alive(o));  // this host, Slurm silent: its PID decides
  o.start_ticks += 1;
  EXPECT_FALSE(owner_alive(o));
}

// A batch script runs the coordinator on the job's first node: there too the job decides, so
// that node is not reverted while the job (and the others' patch) lives on.
TEST_F(RemoteOwner, OnTheCoordinatorsOwnHostTheJobDecidesToo) {
  Owner o{::getpid(), process_start_ticks(::getpid()).value_or(0) + 1, this_host(), {"slurm", "77"}};  // not us: dead
  squeue("echo RUNNING");
  EXPECT_TRUE(owner_alive(o));
  squeue("echo COMPLETED");
  EXPECT_FALSE(owner_alive(o));
}
