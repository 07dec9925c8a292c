// Engagement (issue 21) with a real torch cpp_extension JIT extension (Debian's python3-torch):
// a server process that does not load the kernel itself and a forked worker that loads it with
// torch.ops.load_library, as serving stacks' worker pools do. The parent's --pid finds the
// worker's mapping through the process tree.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace overlay::test;

namespace {
constexpr const char* kSystemPython = "/usr/bin/python3";
}  // namespace

TEST(EngagedRealWorld, TorchJitExtensionLoadedByAForkedWorker) {
  if (!have({kSystemPython, "-c", "import torch.utils.cpp_extension"}))
    GTEST_SKIP() << kSystemPython << " lacks torch (python3-torch, libtorch-dev)";
  TempDir t;
  fs::path ext = t / "ext/kern", src = t / "src/kern.cpp";
  write_file(src, "extern \"C\" int kernel() { return 4; }\n");
  write_file(t / "best/kern.cpp", "extern \"C\" int kernel() { return 7; }\n");
  fs::create_directories(ext);
  Cmd b = run(
      {kSystemPython, "-c",
       "import sys\nfrom torch.utils import cpp_extension\n"
       "cpp_extension.load(name='kern', sources=[sys.argv[1]], build_directory=sys.argv[2], is_python_module=False)\n",
       src.string(), ext.string()});
  ASSERT_EQ(b.rc, 0) << b.err;
  std::string ov = (t / "ov").string(), so = (ext / "kern.so").string();
  Cmd a = run_overlay({"add-native", "--overlay", ov, "--target", src.string(), "--patched-file",
                       (t / "best/kern.cpp").string(), "--artifact", (ext / "kern.o").string(), "--artifact", so,
                       "--build-cmd", "ninja -C " + ext.string(), "--build-cwd", ext.string()});
  ASSERT_EQ(a.rc, 0) << a.err;
  fs::path ready = t / "ready";
  pid_t server = fork();
  if (server == 0) {
    setpgid(0, 0);
    execl(kSystemPython, "python3", "-c",
          "import os, sys, time, torch\npid = os.fork()\nif pid == 0:\n    torch.ops.load_library(sys.argv[1])\n"
          "    open(sys.argv[2], 'w').write('ready')\n    time.sleep(300)\nelse:\n    os.waitpid(pid, 0)\n",
          so.c_str(), ready.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_TRUE(until_ready_or_exited(server, [&] { return fs::exists(ready); }));
  Cmd e = run_overlay({"engaged", "--overlay", ov, "--pid", std::to_string(server)});
  Cmd r = run_overlay({"--json", "revert", "--overlay", ov});
  Cmd c = run_overlay({"status", "--overlay", ov, "--check-clean"});
  ASSERT_TRUE(kill_group_and_wait(server));
  EXPECT_EQ(e.rc, 0) << e.out << e.err;
  EXPECT_NE(e.out.find("(a descendant) maps the patched " + so), std::string::npos) << e.out;
  EXPECT_EQ(e.out.find("process " + std::to_string(server) + " (python3"), std::string::npos)
      << "the server maps no kernel: " << e.out;
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\"still_running\""), std::string::npos);
  EXPECT_EQ(c.rc, 1) << c.out;
  EXPECT_NE(c.err.find("still runs the patched " + so + ": restart it"), std::string::npos) << c.err;
  EXPECT_EQ(run_overlay({"status", "--overlay", ov, "--check-clean"}).rc, 0);
}
