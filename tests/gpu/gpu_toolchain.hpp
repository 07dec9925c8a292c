#pragma once
// Finding a GPU toolchain and a GPU for the HIP smoke tests.
#include <filesystem>
#include <optional>
#include <string>

namespace overlay::test {

struct GpuToolchain {
  std::string kind;                  // "rocm" or "cuda"
  std::filesystem::path compiler;    // hipcc or nvcc
  std::filesystem::path compat_dir;  // set when the NVIDIA build needs tests/gpu/compat
  std::string describe() const;
};

// hipcc (PATH, /opt/rocm/bin) wins; else nvcc (PATH, /usr/local/cuda/bin). Nothing if neither.
std::optional<GpuToolchain> find_gpu_toolchain();
// Why there is no usable GPU device here, or "" when there is one.
std::string why_no_gpu(const GpuToolchain& tc);

}  // namespace overlay::test
