#include "output.hpp"

#include <cstdio>
#include <exception>

#include "commands.hpp"
#include "overlay/error.hpp"

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

int guarded(const std::string& subcommand, const std::function<int()>& body) {
  try {
    return body();
  } catch (const LockTimeout& e) {
    err_line(subcommand, e.what());
    return kLockTimeout;
  } catch (const std::exception& e) {
    err_line(subcommand, e.what());
    return kFailed;
  }
}

}  // namespace overlay::cli
