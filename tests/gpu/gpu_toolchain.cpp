#include "gpu_toolchain.hpp"

#include <cstdlib>
#include <sstream>

#include "test_util.hpp"

namespace overlay::test {
namespace {

std::optional<fs::path> find_program(const std::string& name, const std::vector<fs::path>& extra) {
  std::vector<fs::path> dirs;
  std::istringstream path(std::getenv("PATH") ? std::getenv("PATH") : "");
  std::string d;
  while (std::getline(path, d, ':'))
    if (!d.empty()) dirs.emplace_back(d);
  dirs.insert(dirs.end(), extra.begin(), extra.end());
  for (const auto& dir : dirs)
    if (fs::is_regular_file(dir / name)) return dir / name;
  return std::nullopt;
}

// True when nvcc compiles a file including the system hip/hip_runtime.h for NVIDIA.
bool system_hip_header_works(const fs::path& nvcc) {
  TempDir t;
  write_file(t / "probe.hip", "#include <hip/hip_runtime.h>\n__global__ void k(float* p) { p[0] = 1.0f; }\n");
  Cmd c = run({nvcc.string(), "-x", "cu", "-D__HIP_PLATFORM_NVIDIA__", "-c", (t / "probe.hip").string(), "-o",
               (t / "probe.o").string()});
  return c.rc == 0;
}

}  // namespace

std::string GpuToolchain::describe() const {
  if (kind == "rocm") return "ROCm: " + compiler.string();
  return "NVIDIA: " + compiler.string() +
         (compat_dir.empty() ? " with the system hip/hip_runtime.h"
                             : " with the test's compat header " + compat_dir.string());
}

std::optional<GpuToolchain> find_gpu_toolchain() {
  if (auto hipcc = find_program("hipcc", {"/opt/rocm/bin"})) return GpuToolchain{"rocm", *hipcc, {}};
  if (auto nvcc = find_program("nvcc", {"/usr/local/cuda/bin"})) {
    GpuToolchain tc{"cuda", *nvcc, {}};
    if (!system_hip_header_works(*nvcc)) tc.compat_dir = source_dir() / "tests/gpu/compat";
    return tc;
  }
  return std::nullopt;
}

std::string why_no_gpu(const GpuToolchain& tc) {
  if (tc.kind == "rocm") return fs::exists("/dev/kfd") ? "" : "no /dev/kfd: no ROCm GPU on this machine";
  for (const char* dev : {"/dev/nvidia0", "/dev/nvidiactl"})
    if (fs::exists(dev)) return "";
  return "no /dev/nvidia0: no NVIDIA GPU on this machine";
}

}  // namespace overlay::test
