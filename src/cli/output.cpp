#include "output.hpp"

#include <cstdio>

namespace overlay::cli {

void out_line(const std::string& s) {
  std::fputs(s.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void err_line(const std::string& subcommand, const std::string& msg) {
  std::string one = msg;
  for (char& c : one)
    if (c == '\n') c = ' ';
  std::fprintf(stderr, "%s: %s\n", subcommand.c_str(), one.c_str());
  std::fflush(stderr);
}

}  // namespace overlay::cli
