#include "overlay/owner.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace overlay;

TEST(Owner, SelfIsAliveWithStartTime) {
  auto ticks = process_start_ticks(::getpid());
  ASSERT_TRUE(ticks);
  EXPECT_TRUE(owner_alive({::getpid(), *ticks}));
  EXPECT_FALSE(owner_alive({::getpid(), *ticks + 1}));  // same PID, another process
}

TEST(Owner, DeadProcessIsNotAlive) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  auto ticks = process_start_ticks(pid);
  ::waitpid(pid, nullptr, 0);
  EXPECT_FALSE(owner_alive({pid, ticks.value_or(1)}));
  EXPECT_FALSE(process_start_ticks(pid));
}
