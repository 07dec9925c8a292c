// The GPU proof: examples/hip_smoke built as an install, run (4.0), patched in place with
// add-native and the install's own incremental build, run (7.0), reverted byte-exact, run (4.0).
// And engagement: a driver kept running from before add-native is `stale` (NOT_ENGAGED), one
// started after it ENGAGED; revert while that one runs leaves status --check-clean failing.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include <gtest/gtest.h>

#include "gpu_toolchain.hpp"
#include "test_util.hpp"

using namespace overlay::test;

namespace {

struct HipInstall {
  fs::path root, build, src, lib, driver;
  std::vector<std::string> env;
};

HipInstall build_install(const fs::path& root, const GpuToolchain& tc) {
  HipInstall in;
  in.root = root;
  in.build = root / "build";
  in.src = root / "src/kernel.hip";
  in.lib = in.build / "libsmoke_kernel.so";
  in.driver = in.build / "hip_smoke";
  fs::path example = source_dir() / "examples/hip_smoke";
  fs::create_directories(root);
  fs::copy(example / "src", root / "src", fs::copy_options::recursive);
  fs::copy_file(example / "CMakeLists.txt", root / "CMakeLists.txt");
  in.env = {"PATH=" + tc.compiler.parent_path().string() + ":" +
            (std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin")};
  std::vector<std::string> cfg{"cmake",
                               "-S",
                               root.string(),
                               "-B",
                               in.build.string(),
                               "-G",
                               "Ninja",
                               "-DCMAKE_BUILD_TYPE=Release",
                               "-DHIP_SMOKE_BACKEND=" + tc.kind};
  if (!tc.compat_dir.empty()) cfg.push_back("-DHIP_SMOKE_COMPAT_DIR=" + tc.compat_dir.string());
  if (tc.kind == "rocm") cfg.push_back("-DCMAKE_HIP_COMPILER=" + tc.compiler.string());
  Cmd c = run(cfg, root, in.env);
  EXPECT_EQ(c.rc, 0) << c.out << c.err;
  c = run({"cmake", "--build", in.build.string()}, root, in.env);
  EXPECT_EQ(c.rc, 0) << c.out << c.err;
  return in;
}

std::string run_driver(const HipInstall& in) {
  Cmd c = run({in.driver.string()}, in.root, in.env);
  EXPECT_EQ(c.rc, 0) << c.err;
  return c.out;
}

std::string value_of(const std::string& line) { return line.substr(0, line.find(' ')); }

// Starts the driver in its hold mode (it stays running with the library loaded); waits until it
// has computed its value, which it returns through `value`.
pid_t start_held(const HipInstall& in, const fs::path& ready, std::string& value) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl(in.driver.c_str(), "hip_smoke", ready.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // The value's line is complete once it ends in a newline (the file appears before its bytes).
  auto complete = [&] {
    std::error_code ec;
    if (!fs::exists(ready, ec)) return false;
    std::string text = read_file(ready);
    return !text.empty() && text.back() == '\n';
  };
  value = until_ready_or_exited(pid, complete) ? read_file(ready) : "never ready (the driver ended)";
  while (!value.empty() && value.back() == '\n') value.pop_back();
  return pid;
}

void stop(pid_t pid) { EXPECT_TRUE(kill_group_and_wait(pid)) << "the driver outlived SIGKILL"; }

}  // namespace

TEST(GpuSmoke, HipKernelRecompiledOnGpuAndRevertedByteExact) {
  auto tc = find_gpu_toolchain();
  if (!tc) GTEST_SKIP() << "no GPU toolchain: neither hipcc (PATH, /opt/rocm/bin) nor nvcc (PATH, /usr/local/cuda/bin)";
  if (std::string why = why_no_gpu(*tc); !why.empty()) GTEST_SKIP() << why;
  std::printf("gpu: toolchain %s\n", tc->describe().c_str());
  TempDir t;
  HipInstall in = build_install(t / "install", *tc);
  ASSERT_TRUE(fs::exists(in.lib));
  std::string first = run_driver(in);
  std::printf("gpu: device %s", first.substr(first.find(' ') + 1).c_str());
  EXPECT_EQ(value_of(first), "4.0");
  std::string src_sha = file_sha256(in.src), lib_sha = file_sha256(in.lib);
  std::printf("gpu: before  source %s  library %s\n", src_sha.c_str(), lib_sha.c_str());

  std::string ov = (t / "ov").string();
  std::string held_before_value, held_after_value;
  pid_t held_before = start_held(in, t / "before.ready", held_before_value);
  EXPECT_EQ(held_before_value, "4.0");
  Cmd add = run_overlay({"add-native", "--overlay", ov, "--target", in.src.string(), "--patched-file",
                         (source_dir() / "examples/hip_smoke/patched/kernel.hip").string(), "--artifact",
                         in.lib.string(), "--build-cmd", "cmake --build " + in.build.string()},
                        in.root, in.env);
  ASSERT_EQ(add.rc, 0) << add.err;
  EXPECT_NE(add.err.find("kernel.hip.o"), std::string::npos) << "the build did not recompile the kernel: " << add.err;
  Cmd verify = run_overlay({"verify-native", "--overlay", ov});
  EXPECT_EQ(verify.out, "FRESH_BUILD_OK (checked 1)\n");
  std::string second = run_driver(in);
  EXPECT_EQ(value_of(second), "7.0");
  Cmd stale = run_overlay({"engaged", "--overlay", ov, "--pid", std::to_string(held_before)});
  EXPECT_EQ(stale.rc, 1) << stale.out;
  EXPECT_NE(stale.out.find("NOT_ENGAGED process " + std::to_string(held_before) + " maps the stale build of " +
                           in.lib.string()),
            std::string::npos)
      << stale.out;
  pid_t held_after = start_held(in, t / "after.ready", held_after_value);
  EXPECT_EQ(held_after_value, "7.0");
  Cmd engaged = run_overlay({"engaged", "--overlay", ov, "--pid", std::to_string(held_after)});
  EXPECT_EQ(engaged.rc, 0) << engaged.out;
  std::printf("gpu: engaged (started before add-native) %s", stale.out.substr(stale.out.find("NOT_ENGAGED")).c_str());
  std::printf("gpu: engaged (started after add-native)  %s", engaged.out.substr(engaged.out.find("ENGAGED")).c_str());
  stop(held_before);
  std::printf("gpu: patched library %s\n", file_sha256(in.lib).c_str());

  Cmd rev = run_overlay({"revert", "--overlay", ov});
  ASSERT_EQ(rev.rc, 0) << rev.err;
  Cmd dirty = run_overlay({"status", "--overlay", ov, "--check-clean"});
  EXPECT_EQ(dirty.rc, 1);
  EXPECT_NE(dirty.err.find("process " + std::to_string(held_after) + " ("), std::string::npos) << dirty.err;
  std::printf("gpu: after revert, while the candidate runs: %s", dirty.err.c_str());
  stop(held_after);
  Cmd clean = run_overlay({"status", "--overlay", ov, "--check-clean"});
  EXPECT_EQ(clean.rc, 0) << clean.out << clean.err;
  std::printf("gpu: after   source %s  library %s\n", file_sha256(in.src).c_str(), file_sha256(in.lib).c_str());
  EXPECT_EQ(file_sha256(in.src), src_sha);
  EXPECT_EQ(file_sha256(in.lib), lib_sha);
  std::string third = run_driver(in);
  EXPECT_EQ(value_of(third), "4.0");
  std::printf("gpu: values %s -> %s -> %s\n", value_of(first).c_str(), value_of(second).c_str(),
              value_of(third).c_str());
}
