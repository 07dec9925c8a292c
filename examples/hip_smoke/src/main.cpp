// Driver: launches the kernel through the library and prints "<value> <device name>".
#include <cstdio>

extern "C" int smoke_run(float* value, char* device_name, int name_len);

int main() {
  float value = 0;
  char name[256];
  int rc = smoke_run(&value, name, sizeof name);
  if (rc != 0) {
    std::fprintf(stderr, "hip_smoke: GPU run failed (code %d)\n", rc);
    return 1;
  }
  std::printf("%.1f %s\n", static_cast<double>(value), name);
  return 0;
}
