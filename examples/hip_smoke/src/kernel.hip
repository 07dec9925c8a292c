// The "installed" GPU kernel: fills device memory with 4.0f.
#include <hip/hip_runtime.h>

#include <cstring>

namespace {

constexpr int kN = 1024;
constexpr float kValue = 4.0f;

__global__ void fill(float* out, int n) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = kValue;
}

}  // namespace

// Runs the kernel on device 0 and reports the value every element holds (or an error code).
extern "C" int smoke_run(float* value, char* device_name, int name_len) {
  hipDeviceProp_t prop;
  if (hipGetDeviceProperties(&prop, 0) != hipSuccess) return 1;
  std::strncpy(device_name, prop.name, static_cast<std::size_t>(name_len - 1));
  device_name[name_len - 1] = '\0';
  float* dev = nullptr;
  if (hipMalloc(reinterpret_cast<void**>(&dev), kN * sizeof(float)) != hipSuccess) return 2;
  hipLaunchKernelGGL(fill, dim3(kN / 256), dim3(256), 0, 0, dev, kN);
  if (hipDeviceSynchronize() != hipSuccess) return 3;
  static float host[kN];
  if (hipMemcpy(host, dev, kN * sizeof(float), hipMemcpyDeviceToHost) != hipSuccess) return 4;
  hipFree(dev);
  for (int i = 1; i < kN; ++i)
    if (host[i] != host[0]) return 5;
  *value = host[0];
  return 0;
}
