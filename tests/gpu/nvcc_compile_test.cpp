// A real GPU-toolchain recompile with no GPU needed: the .hip sources of examples/hip_smoke
// (installed and patched) compile with nvcc through the same header path the GPU test uses.
#include <gtest/gtest.h>

#include "gpu_toolchain.hpp"
#include "test_util.hpp"

using namespace overlay::test;

TEST(NvccCompile, HipSmokeSourcesCompile) {
  auto tc = find_gpu_toolchain();
  if (!tc || tc->kind != "cuda") GTEST_SKIP() << "no nvcc on PATH or in /usr/local/cuda/bin";
  std::printf("nvcc: %s\n", tc->describe().c_str());
  TempDir t;
  for (const char* src : {"examples/hip_smoke/src/kernel.hip", "examples/hip_smoke/patched/kernel.hip"}) {
    std::vector<std::string> argv{tc->compiler.string(),
                                  "-x",
                                  "cu",
                                  "-D__HIP_PLATFORM_NVIDIA__",
                                  "-Xcompiler",
                                  "-fPIC",
                                  "-c",
                                  (source_dir() / src).string(),
                                  "-o",
                                  (t / "k.o").string()};
    if (!tc->compat_dir.empty()) argv.push_back("-I" + tc->compat_dir.string());
    Cmd c = run(argv);
    EXPECT_EQ(c.rc, 0) << src << ": " << c.err;
    EXPECT_GT(fs::file_size(t / "k.o"), 1000u);
    fs::remove(t / "k.o");
  }
}
