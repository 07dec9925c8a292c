#include <cstdio>

extern "C" float kernel_value();

int main() {
  std::printf("%.1f\n", static_cast<double>(kernel_value()));
  return 0;
}
