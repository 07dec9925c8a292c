#include "overlay/process_scan.hpp"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

TEST(ProcessScan, MapsLinesWithSpacesDeletedAndAnonymous) {
  MappedFile f;
  ASSERT_TRUE(
      parse_maps_line("7f1c2a000000-7f1c2a021000 r-xp 00000000 fd:01 1234567    /opt/x y/libk.so (deleted)", f));
  EXPECT_EQ(f.path, "/opt/x y/libk.so");
  EXPECT_TRUE(f.deleted);
  EXPECT_EQ(f.dev, makedev(0xfd, 0x01));
  EXPECT_EQ(f.ino, 1234567u);
  ASSERT_TRUE(parse_maps_line("55d0-55d1 r--p 00000000 08:02 42 /usr/bin/python3.11", f));
  EXPECT_FALSE(f.deleted);
  EXPECT_FALSE(parse_maps_line("7ffd-7ffe rw-p 00000000 00:00 0 [stack]", f));
  EXPECT_FALSE(parse_maps_line("7ffd-7ffe rw-p 00000000 00:00 0", f));
  EXPECT_FALSE(parse_maps_line("garbage", f));
}

// The real /proc: this test process maps its own executable, is its parent's descendant, and a
// filter on a path nobody maps keeps nothing.
TEST(ProcessScan, FindsThisProcessMappingItsExecutable) {
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  ProcessScan scan = scan_processes(real_disk(), {exe});
  const ProcessInfo* me = scan.find(getpid());
  ASSERT_NE(me, nullptr);
  struct stat st {};
  ASSERT_EQ(stat(exe.c_str(), &st), 0);
  bool found = false;
  for (const auto& f : me->files) found = found || (f.path == exe && f.ino == st.st_ino && f.dev == st.st_dev);
  EXPECT_TRUE(found);
  EXPECT_EQ(me->ppid, getppid());
  EXPECT_NE(me->cmdline.find("overlay_unit_tests"), std::string::npos) << me->cmdline;
  ProcessScan all = scan_processes(real_disk());
  auto tree = all.with_descendants({getppid()});
  EXPECT_TRUE(std::any_of(tree.begin(), tree.end(), [](const ProcessInfo* p) { return p->pid == getpid(); }));
  EXPECT_TRUE(scan_processes(real_disk(), {"/nonexistent/lib.so"}).processes.empty());
}

// A zombie (exited, not yet reaped) runs nothing: neither read_process nor a scan reports it,
// while a live child is read with its parent and start time.
TEST(ProcessScan, AZombieIsNotARunningProcess) {
  pid_t live = fork();
  if (live == 0) {
    pause();
    _exit(0);
  }
  pid_t zombie = fork();
  if (zombie == 0) _exit(0);
  for (int i = 0; i < 500; ++i) {  // until the kernel has made it a zombie
    std::string stat = read_file("/proc/" + std::to_string(zombie) + "/stat");
    if (stat.find(") Z ") != std::string::npos) break;
    usleep(2000);
  }
  auto p = read_process(real_disk(), live);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->ppid, getpid());
  EXPECT_GT(p->start_ticks, 0u);
  EXPECT_FALSE(read_process(real_disk(), zombie).has_value());
  ProcessScan scan = scan_processes(real_disk());
  EXPECT_NE(scan.find(live), nullptr);
  EXPECT_EQ(scan.find(zombie), nullptr);
  kill(live, SIGKILL);
  waitpid(live, nullptr, 0);
  waitpid(zombie, nullptr, 0);
  EXPECT_FALSE(read_process(real_disk(), live).has_value());
}
