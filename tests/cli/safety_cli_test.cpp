// Compatibility with overlay_setup.py's layout, concurrency and kill -9, through the real binary.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

pid_t spawn_overlay(const std::vector<std::string>& args) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    std::vector<char*> argv{const_cast<char*>(overlay_binary())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

int wait_rc(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// An install big enough that add-native and revert take a measurable time.
Install crash_install(const fs::path& root) {
  Install in = make_install(root);
  std::string big(8 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  write_file(in.artifact, big, 0755);
  for (int i = 0; i < 300; ++i) write_file(in.cache / ("d" + std::to_string(i % 10)) / ("f" + std::to_string(i)), std::to_string(i) + big.substr(0, 2000));
  return in;
}

std::vector<std::string> crash_add_args(const fs::path& t, const Install& in) {
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  return {"add-native", "--overlay", (t / "ov").string(), "--target", in.source.string(), "--patched-file",
          (t / "patched.cpp").string(), "--artifact", in.artifact.string(), "--invalidate-cache", in.cache.string(),
          "--build-cwd", in.root.string(), "--build-cmd",
          "sh -c 'head -c 9000000 /dev/urandom > lib/libk.so; mkdir -p cache/x; for i in 1 2 3 4 5 6 7 8; do echo $i > cache/x/$i; done'"};
}

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

TEST(Compat, RevertsOverlaySetupPyLayout) {
  TempDir t;
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.root);
  fs::path ov = t / "ov";
  fs::create_directories(ov / "_native_backup");
  fs::copy_file(in.source, ov / "_native_backup/src_0_kernel.cpp");
  fs::copy_file(in.artifact, ov / "_native_backup/art_0_0_libk.so");
  Cmd tar = run({"python3", "-c", "import tarfile,sys; t=tarfile.open(sys.argv[1],'w'); t.add(sys.argv[2], arcname='.'); t.close()",
                 (ov / "_native_backup/cache_0_0.tar").string(), in.cache.string()});
  ASSERT_EQ(tar.rc, 0) << tar.err;
  json m = {{"modules", json::array()}, {"rebinds", json::array()}, {"captures", json::array()},
            {"natives", {{{"sources", {{{"install_path", in.source.string()}, {"backup", "_native_backup/src_0_kernel.cpp"},
                                        {"sha256", file_sha256(in.source)}}}},
                          {"artifacts", {{{"path", in.artifact.string()}, {"backup", "_native_backup/art_0_0_libk.so"},
                                          {"sha256", file_sha256(in.artifact)}, {"existed", true}}}},
                          {"caches", {{{"dir", in.cache.string()}, {"backup_tar", "_native_backup/cache_0_0.tar"}, {"existed", true}}}},
                          {"build_cmds", {{"make"}}}, {"build_cwd", in.root.string()},
                          {"verify", {{"artifact", in.artifact.string()}, {"pre_sha256", file_sha256(in.artifact)}}}}}}};
  write_file(ov / "_overlay_manifest.json", m.dump(2));
  // The install as the Python tool leaves it: patched, rebuilt, cache rebuilt.
  write_file(in.source, "patched\n");
  write_file(in.artifact, "rebuilt\n");
  fs::remove_all(in.cache);
  write_file(in.cache / "jit/new", "x");
  Cmd r = run_overlay({"revert", "--overlay", ov.string()});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(tree_digest(in.root), before);
  EXPECT_TRUE(fs::is_empty(ov / "_native_backup"));
  json after = json::parse(read_file(ov / "_overlay_manifest.json"));
  EXPECT_TRUE(after["natives"].empty());
  EXPECT_TRUE(after["modules"].is_array());
}

TEST(Concurrency, SixteenParallelAddsLoseNothing) {
  for (int trial = 0; trial < 3; ++trial) {
    TempDir t;
    std::vector<pid_t> pids;
    for (int i = 0; i < 16; ++i) {
      write_file(t / "inst" / ("k" + std::to_string(i) + ".cpp"), "original " + std::to_string(i) + "\n");
      write_file(t / "p" / ("k" + std::to_string(i) + ".cpp"), "patched " + std::to_string(i) + "\n");
    }
    std::string before = tree_digest(t / "inst");
    for (int i = 0; i < 16; ++i) {
      std::string k = "k" + std::to_string(i) + ".cpp";
      pids.push_back(spawn_overlay({"add-native", "--overlay", (t / "ov").string(), "--target", (t / "inst" / k).string(),
                                    "--patched-file", (t / "p" / k).string(), "--build-cmd", "true"}));
    }
    for (pid_t p : pids) EXPECT_EQ(wait_rc(p), 0);
    json m = json::parse(read_file(t / "ov/_overlay_manifest.json"));
    EXPECT_EQ(m["natives"].size(), 16u);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(read_file(t / "inst" / ("k" + std::to_string(i) + ".cpp")), "patched " + std::to_string(i) + "\n");
    // revert and gc-stale racing: no damage, everything restored once.
    pid_t a = spawn_overlay({"revert", "--overlay", (t / "ov").string()});
    pid_t b = spawn_overlay({"gc-stale", "--root", t.path().string()});
    EXPECT_EQ(wait_rc(a), 0);
    EXPECT_EQ(wait_rc(b), 0);
    EXPECT_EQ(tree_digest(t / "inst"), before);
    EXPECT_TRUE(json::parse(read_file(t / "ov/_overlay_manifest.json"))["natives"].empty());
  }
}

// kill -9 at uniformly random instants of add-native (with a build) and of revert: a later
// revert must restore the install byte for byte.
TEST(Crash, KillNineAnywhereThenRevertRestores) {
  const int trials = std::getenv("OVERLAY_CRASH_TRIALS") ? std::atoi(std::getenv("OVERLAY_CRASH_TRIALS")) : 20;
  double add_time = 0, revert_time = 0;
  {  // measure one undisturbed run of each
    TempDir t;
    Install in = crash_install(t / "inst");
    auto s = std::chrono::steady_clock::now();
    ASSERT_EQ(wait_rc(spawn_overlay(crash_add_args(t.path(), in))), 0);
    add_time = seconds(std::chrono::steady_clock::now() - s);
    s = std::chrono::steady_clock::now();
    ASSERT_EQ(wait_rc(spawn_overlay({"revert", "--overlay", (t / "ov").string()})), 0);
    revert_time = seconds(std::chrono::steady_clock::now() - s);
  }
  std::mt19937 rng(12345);
  int killed_add = 0, killed_revert = 0;
  for (int i = 0; i < trials; ++i) {
    TempDir t;
    Install in = crash_install(t / "inst");
    std::string before = tree_digest(in.root);
    bool during_revert = i % 2 == 1;
    if (during_revert) {
      ASSERT_EQ(wait_rc(spawn_overlay(crash_add_args(t.path(), in))), 0);
    }
    double window = during_revert ? revert_time : add_time;
    auto delay = std::chrono::duration<double>(std::uniform_real_distribution<double>(0, window)(rng));
    pid_t pid = spawn_overlay(during_revert ? std::vector<std::string>{"revert", "--overlay", (t / "ov").string()}
                                            : crash_add_args(t.path(), in));
    std::this_thread::sleep_for(delay);
    ::kill(pid, SIGKILL);
    if (wait_rc(pid) == 128 + SIGKILL) (during_revert ? killed_revert : killed_add)++;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a grandchild of the build finishes its writes
    Cmd r = run_overlay({"revert", "--overlay", (t / "ov").string()});
    EXPECT_EQ(r.rc, 0) << "trial " << i << ": " << r.err;
    EXPECT_EQ(tree_digest(in.root), before) << "trial " << i << " (killed " << (during_revert ? "revert" : "add-native")
                                            << " after " << delay.count() << " s)";
  }
  std::printf("crash: %d trials, %d kills landed during add-native, %d during revert (add %.3f s, revert %.3f s)\n",
              trials, killed_add, killed_revert, add_time, revert_time);
  EXPECT_GT(killed_add + killed_revert, trials / 2);
}
