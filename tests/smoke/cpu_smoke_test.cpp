// The CPU twin of the GPU proof: examples/cpu_smoke built as an "install" with CMake + Ninja,
// patched in place through the real binary with the install's own incremental build, reverted.
#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace overlay::test;

TEST(CpuSmoke, RecompileOutputChangesAndRevertIsByteExact) {
  TempDir t;
  fs::path example = source_dir() / "examples/cpu_smoke";
  fs::path install = t / "install";
  fs::create_directories(install);
  fs::copy(example / "src", install / "src", fs::copy_options::recursive);
  fs::copy_file(example / "CMakeLists.txt", install / "CMakeLists.txt");
  Cmd cfg = run({"cmake", "-S", install.string(), "-B", (install / "build").string(), "-G", "Ninja",
                 "-DCMAKE_BUILD_TYPE=Release"});
  ASSERT_EQ(cfg.rc, 0) << cfg.err;
  ASSERT_EQ(run({"cmake", "--build", (install / "build").string()}).rc, 0);
  fs::path smoke = install / "build/smoke", lib = install / "build/libkernel.so", src = install / "src/kernel.cpp";
  EXPECT_EQ(run({smoke.string()}).out, "4.0\n");
  std::string src_sha = file_sha256(src), lib_sha = file_sha256(lib);

  std::string ov = (t / "ov").string();
  Cmd add = run_overlay({"add-native", "--overlay", ov, "--target", src.string(), "--patched-file",
                         (example / "patched/kernel.cpp").string(), "--artifact", lib.string(), "--build-cmd",
                         "cmake --build " + (install / "build").string()});
  ASSERT_EQ(add.rc, 0) << add.err;
  EXPECT_NE(add.err.find("Building CXX object CMakeFiles/kernel.dir/src/kernel.cpp.o"), std::string::npos) << add.err;
  EXPECT_EQ(add.err.find("main.cpp.o"), std::string::npos) << "the incremental build recompiled the driver";
  EXPECT_EQ(run_overlay({"verify-native", "--overlay", ov}).out, "FRESH_BUILD_OK (checked 1)\n");
  EXPECT_EQ(run({smoke.string()}).out, "7.0\n");

  Cmd rev = run_overlay({"revert", "--overlay", ov});
  ASSERT_EQ(rev.rc, 0) << rev.err;
  EXPECT_EQ(file_sha256(src), src_sha);
  EXPECT_EQ(file_sha256(lib), lib_sha);
  EXPECT_EQ(run({smoke.string()}).out, "4.0\n");
  // The restored source is newer than the patched object: the next build recompiles it and the
  // install stays at the original behaviour (no stale object relinked).
  ASSERT_EQ(run({"cmake", "--build", (install / "build").string()}).rc, 0);
  EXPECT_EQ(run({smoke.string()}).out, "4.0\n");
}
