// Driver: launches the kernel through the library and prints "<value> <device name>". Given a
// file name, it also writes the value there and then stays running (until killed), as a server
// that loaded the kernel does: the engagement check looks at such a process.
#include <unistd.h>

#include <cstdio>

extern "C" int smoke_run(float* value, char* device_name, int name_len);

int main(int argc, char** argv) {
  float value = 0;
  char name[256];
  int rc = smoke_run(&value, name, sizeof name);
  if (rc != 0) {
    std::fprintf(stderr, "hip_smoke: GPU run failed (code %d)\n", rc);
    return 1;
  }
  std::printf("%.1f %s\n", static_cast<double>(value), name);
  if (argc > 1) {
    std::fflush(stdout);
    if (FILE* f = std::fopen(argv[1], "w")) {
      std::fprintf(f, "%.1f\n", static_cast<double>(value));
      std::fclose(f);
    }
    for (;;) pause();
  }
  return 0;
}
